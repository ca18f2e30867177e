"""nbgrader settings for a course directory of Attention by Hand: copy this file to the course directory's root
(next to source/). The README's "For instructors" section walks through the whole workflow;
tests/nbgrader/test_roundtrip.py runs it with this file.
"""

from nbgrader.converters import GenerateAssignment
from nbgrader.preprocessors import ClearSolutions

c = get_config()  # noqa: F821 - defined by traitlets when nbgrader loads this file

# The name of the course in nbgrader's exchange (release, fetch, submit, collect); any short id will do.
c.CourseDirectory.course_id = "attention-by-hand"
# The exchange is a folder every learner can write to; nbgrader's default is /srv/nbgrader/exchange. There a
# submission's name says whose it is: the workshop hub (instructors/jupyterhub/) sets its exchange service instead.
# c.Exchange.root = "/srv/nbgrader/exchange"

# The learners' copies nbgrader generates are the repository's exercises/, cell for cell (the round-trip test
# checks it): the same stub text, and at the top level of a cell the comment alone, because a bare top-level
# raise would stop "Run All" before the self-check (interview mode's empty cell).
c.ClearSolutions.code_stub = {"python": '# YOUR CODE HERE\nraise NotImplementedError("your code here")'}


class ClearSolutionsKeepRunAll(ClearSolutions):
    """nbgrader's ClearSolutions, without the raise where a solution region starts at the top level of a cell."""

    def _replace_solution_region(self, cell, language):
        replaced = super()._replace_solution_region(cell, language)
        if replaced and cell.cell_type == "code":
            top_level_raise = self.code_stub[language].splitlines()[-1]  # the stub's raise, not indented
            cell.source = "\n".join(line for line in cell.source.split("\n") if line != top_level_raise)
        return replaced


c.GenerateAssignment.preprocessors = [
    ClearSolutionsKeepRunAll if p is ClearSolutions else p
    for p in GenerateAssignment.class_traits()["preprocessors"].default()
]
