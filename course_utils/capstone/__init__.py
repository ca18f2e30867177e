"""The capstone (notebook 11): a tiny GPT built from the reference modules (``gpt``), its induction task and
training (``induction``, ``python -m course_utils.capstone``), and its trained checkpoints (``checkpoints/``).
Also importable by their short names, ``course_utils.gpt`` and ``course_utils.induction``."""
