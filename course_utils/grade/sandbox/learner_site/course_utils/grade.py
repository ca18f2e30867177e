"""check() while grading: it records which class the submission asks to grade; the verdict comes later,
from the grader outside this process."""

REQUESTS: list[tuple[str, object]] = []  # (exercise, the class or a copy of the namespace)


def check(exercise, cls=None, *args, **kwargs):
    # check("id", globals()): the namespace as it is now, as the notebook's own check() sees it
    REQUESTS.append((exercise, dict(cls) if isinstance(cls, dict) else cls))
    return None


ANSWERS: list[tuple[str, object]] = []  # (question, value)


def answer(question, value=None, *args, **kwargs):
    ANSWERS.append((question, value))
    return None


def check_answers(answers, *args, **kwargs):
    for question, value in dict(answers).items():
        ANSWERS.append((question, value))
    return None
