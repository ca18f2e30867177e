"""Print the scores in a course directory's nbgrader gradebook as JSON.

Run with nbgrader's own Python (the round-trip test does): python gradebook_scores.py COURSE_DIR COURSE_ID ASSIGNMENT
Output: {student: {"score", "max_score", "notebooks": {name: {"score", "max_score"}}}}
"""

import json
import sys
from pathlib import Path

from nbgrader.api import Gradebook


def scores(course_dir: Path, course_id: str, assignment: str) -> dict:
    found = {}
    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}", course_id) as gb:
        for student in gb.students:
            submission = gb.find_submission(assignment, student.id)
            found[student.id] = {
                "score": submission.score,
                "max_score": submission.max_score,
                "notebooks": {nb.name: {"score": nb.score, "max_score": nb.max_score} for nb in submission.notebooks},
            }
    return found


if __name__ == "__main__":
    course_dir, course_id, assignment = sys.argv[1:]
    print(json.dumps(scores(Path(course_dir), course_id, assignment)))
