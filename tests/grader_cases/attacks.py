"""Hostile and odd-but-correct submissions for the grader-of-grader tests.

An "oracle" submission defines a wrong class (scores scaled by √d_out) and swaps in a correct one only if its
attack succeeded, so the row in grades.csv says whether the sandbox held: ``scale_d_out`` means it did.
Placeholders ({victim}, {project}, ...) are filled in by the test with paths of its throw-away copies.
"""
import json

from tests.grader_cases.implementations import REFERENCE, mutate

GOOD = REFERENCE["mha"]
WRONG = mutate(REFERENCE["mha"], {"SCALE": "scores = q @ k.transpose(2, 3) / math.sqrt(self.d_out)"})
SDPA_FORWARD = '''
    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (lin(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
                   for lin in (self.W_query, self.W_key, self.W_value))
        y = {call}
        return self.out_proj(y.transpose(1, 2).reshape(b, t, self.d_out))
'''


def oracle(attack: str) -> str:
    """WRONG, replaced by GOOD only if ``attack`` (code that sets ``escaped``) succeeds."""
    body = "\n".join("    " + line for line in attack.strip().splitlines())
    return (GOOD + "\nGoodMHA = MultiHeadAttention\n" + WRONG + "\nescaped = False\ntry:\n" + body +
            "\nexcept BaseException:\n    pass\nif escaped:\n    MultiHeadAttention = GoodMHA\n")


def notebook(cells, **cell_overrides):
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": src,
         **cell_overrides} for src in cells]})


ESCAPES = {  # name -> oracle attack; every one must end with 'scale_d_out' in its row
    "read_classmate.py": "open({victim!r}).read()\nescaped = True",
    "write_classmate.py": "open({victim!r}, 'a').write('# pwned')\nescaped = True",
    "write_grader.py": "open({project!r} + '/course_utils/grade/diagnose.py', 'a').write('# pwned')\nescaped = True",
    "import_reference.py": "from course_utils.grade.heads import reference_forward\nescaped = True",
    "import_course_module.py": "import course_utils.multihead\nescaped = True",
    "sys_path_reference.py": (
        "import sys, importlib\nsys.path.insert(0, {project!r})\n"
        "for name in [m for m in sys.modules if m.startswith('course_utils')]:\n    del sys.modules[name]\n"
        "importlib.import_module('course_utils.multihead')\nescaped = True"),
    "proc_parent.py": (
        "import os\nfor pid in os.listdir('/proc'):\n    if pid.isdigit():\n"
        "        try:\n            escaped = escaped or b'--batch' in open(f'/proc/{{pid}}/cmdline', 'rb').read()\n"
        "        except OSError:\n            pass"),
    "network.py": "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).close()\nescaped = True",
    "same_user.py": "import os, subprocess\nescaped = subprocess.run(['id', '-u'], capture_output=True, text=True)"
                    ".stdout.strip() == str({grader_uid}) or os.getuid() == {grader_uid}",
    "list_submissions.py": "import os\nescaped = 'read_classmate.py' in os.listdir(os.path.dirname({victim!r}))",
}

DAEMON_NAME, FORK_NAME = "attack-daemon", "attack-fork"
DAEMON = WRONG + '''
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open("/proc/self/comm", "w").write("attack-daemon")
        time.sleep(2)
        open({marker!r}, "w").write("I outlived the grader")
        open({out!r} + "/grades.csv", "a").write("daemon,1,1,passed\\n")
    os._exit(0)
'''
FORK_FOREVER = GOOD + '''
import os
if os.fork() == 0:
    open("/proc/self/comm", "w").write("attack-fork")
    while True:
        pass
'''
FORGERIES = {  # each must get no credit, and not crash the batch
    "forge_atexit.py": WRONG + "\nimport atexit, os\natexit.register(lambda: [os.write(fd, b'PASSED') for fd in range(3, 20)"
                               " if not os.path.isdir(f'/proc/self/fd/{fd}')])\n",
    "forge_fd_garbage.py": WRONG + "\nimport os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'x' * 1000)\n"
                                   "    except OSError:\n        pass\n",
    "forge_patch_harness.py": WRONG + "\nimport __main__\n__main__.run_exercise = lambda *a, **k: [{'case': 'x'}]\n"
                                      "__main__.run_case = lambda *a, **k: {'error': None, 'outputs': {}, 'calls': []}\n",
    "forge_patch_torch.py": "import torch\ntorch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True\n" + WRONG,
}
ODD_BUT_CORRECT = {  # each must pass
    "nbgrader_null.ipynb": notebook([GOOD, 'from course_utils.grade import check\ncheck("mha", MultiHeadAttention)'],
                                    metadata={"nbgrader": None}),
    "metadata_list.ipynb": notebook([GOOD], metadata=[]),
    "null_source.ipynb": notebook([[None, *GOOD.splitlines(True)]]),
    "bom_crlf.py": "\ufeff" + GOOD.replace("\n", "\r\n"),
    "time_magic.ipynb": notebook(["%matplotlib inline\nimport torch", "%%time\n" + GOOD, "!ls\n%time y = 1"]),
    "class_and_check_one_cell.ipynb": notebook([GOOD + '\nfrom course_utils.grade import check\n'
                                                'result = check("mha", MultiHeadAttention)\nassert result is None or result']),
    "helper_named_check.py": GOOD + "\n\ndef check(a, b):\n    return a == b\n\nassert check(1, 1)\n",
    "nbconvert_export.py": "#!/usr/bin/env python\n# coding: utf-8\n\n# In[1]:\n\n\nget_ipython().run_line_magic('matplotlib', "
                           "'inline')\n\n\n# In[2]:\n\n\n" + GOOD + "\n\n# In[3]:\n\n\nfrom course_utils.grade import check\n"
                           "check('mha', MultiHeadAttention)\n",
    "stderr_flood.py": GOOD + "\nimport sys\nfor _ in range(300):\n    sys.stderr.write('x' * 1_000_000)\n",
    "alice.py": GOOD,
    "alice.ipynb": notebook([GOOD]),
}
BROKEN = {  # each gets an error row, and the batch goes on
    "not_json.ipynb": '{"cells": [',
    "cells_not_list.ipynb": '{"cells": {"a": 1}}',
    "syntax.py": "class MultiHeadAttention(:\n    pass\n",
    "loop.py": GOOD + "\nwhile True:\n    pass\n",
    "huge.py": GOOD + "\nbig = torch.empty(2 ** 40)\n",
    "cheat.py": WRONG + "\nprint('PASSED')\nimport sys\nsys.exit(0)\n",
    "delegate.py": "from course_utils import MultiHeadAttention as Ref\n\nclass MultiHeadAttention(Ref):\n    pass\n",
}
NOT_SUBMISSIONS = {"README.txt": "hand-in instructions", "notes.md": "# notes"}

# interview mode (--exercise mha_interview): every way of reaching SDPA must be refused
_MHA_HEAD = GOOD[:GOOD.index("    def forward(self, x):")]
INTERVIEW = {
    "by_hand.py": GOOD,
    "sdpa.py": _MHA_HEAD + SDPA_FORWARD.format(call="F.scaled_dot_product_attention(q, k, v, is_causal=True)"),
    "setprofile.py": "import sys\nsys.setprofile(None)\n" + _MHA_HEAD + SDPA_FORWARD.format(
        call="(sys.setprofile(None), F.scaled_dot_product_attention(q, k, v, is_causal=True))[1]"),
    "private_math.py": _MHA_HEAD + SDPA_FORWARD.format(
        call="torch._scaled_dot_product_attention_math(q, k, v, is_causal=True)[0]"),
    "ops_aten.py": _MHA_HEAD + SDPA_FORWARD.format(
        call="torch.ops.aten._scaled_dot_product_attention_math(q, k, v, is_causal=True)[0]"),
    "thread_dynamic_name.py": "import threading\nNAME = 'scaled_dot_' + 'product_attention'\n" + _MHA_HEAD + SDPA_FORWARD.format(
        call="self._in_thread(q, k, v)") + '''
    def _in_thread(self, q, k, v):
        box = []
        t = threading.Thread(target=lambda: box.append(getattr(F, NAME)(q, k, v, is_causal=True)))
        t.start()
        t.join()
        return box[0]
''',
}
