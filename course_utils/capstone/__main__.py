"""``make train``: ``python -m course_utils.capstone`` retrains the capstone's checkpoints (see ``induction.main``)."""

from .induction import main

main()
