"""Tools for the course's authors, not for learners (not installed with course_utils; run from the repository root):

* ``python -m authoring.twins``: keep the Chinese twins (``zh-CN``) of the notebooks and solutions in sync;
* ``python -m authoring.exercises``: generate ``exercises/`` from ``solutions/``.

``make twins`` and ``make exercises`` run them.
"""

# The kernelspec JupyterLab writes into a notebook it opens with ipykernel's python3 kernel. A notebook saved with
# another display name ("Python 3") is rewritten by JupyterLab and autosaved: a learner who only read it would find
# it modified. Every notebook the tools write carries this one (tests/course/test_notebook_metadata.py checks all).
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
