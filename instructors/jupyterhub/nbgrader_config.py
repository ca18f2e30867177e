"""nbgrader's settings in every server of the workshop hub, learners' and instructors' alike (jupyterhub_config.py
puts this folder on JUPYTER_CONFIG_PATH): the course id, and the exchange, which is the hub's exchange service
(attn_exchange.py beside this file). Who submits is the hub user the server's token belongs to: no student id is
taken from the environment or the command line."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attn_exchange import configure  # noqa: E402 - beside this file

c = get_config()  # noqa: F821 - defined by traitlets when nbgrader loads this file

c.CourseDirectory.course_id = os.environ.get("ATTN_COURSE_ID", "attention-by-hand")
configure(c)
