"""nbgrader's settings inside every single-user server of the workshop hub (jupyterhub_config.py puts this folder
on JUPYTER_CONFIG_PATH): the exchange folder, the course id, and each learner's student id, which is their hub name
(also where several hub users share one Unix account, as in the hub's test)."""

import os

c = get_config()  # noqa: F821 - defined by traitlets when nbgrader loads this file

c.Exchange.root = os.environ.get("ATTN_EXCHANGE", "/srv/nbgrader/exchange")
c.CourseDirectory.course_id = os.environ.get("ATTN_COURSE_ID", "attention-by-hand")

user = os.environ.get("JUPYTERHUB_USER", "")
instructors = {name for name in os.environ.get("ATTN_INSTRUCTORS", "").split(",") if name}
if user and user not in instructors:  # an instructor's collect must see every learner, not only themself
    c.CourseDirectory.student_id = user
