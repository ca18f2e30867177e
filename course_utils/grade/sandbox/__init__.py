"""The learner's side of grading: the harness that runs a submission, and the small ``course_utils`` a
submission sees while it is graded (``learner_site/``). Neither holds an answer or computes a verdict."""
