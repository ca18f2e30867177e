"""Tools for the course's authors, not for learners (not installed with course_utils; run from the repository root):

* ``python -m authoring.twins``: keep the Chinese twins (``zh-CN``) of the notebooks and solutions in sync;
* ``python -m authoring.exercises``: generate ``exercises/`` from ``solutions/``.

``make twins`` and ``make exercises`` run them.
"""
