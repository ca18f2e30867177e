"""The grader in Chinese: every text of the catalogue and every mistake has its Chinese, reports in Chinese have no
untranslated line (diagnoses, cases, errors, refusals, notes, the capstone, the follow-ups), English stays English,
``check`` follows the course's language (a zh-CN folder, ATTN_LANG), and the CLI's --lang reaches the batch's files."""

import csv
import json
import re
import string
from pathlib import Path

import pytest

import course_utils as cu
from course_utils.grade import __main__ as cli
from course_utils.grade import batch, check, check_answers, diagnose, grade_class, jail, messages, runner
from course_utils.grade.child import from_child
from course_utils.grade.exercises import EXERCISES, get
from course_utils.grade.messages import JOINS, Msg
from course_utils.grade.protocol import verdict
from course_utils.grade.sandbox import texts
from course_utils.grade.types import Mutant
from tests.conftest import grader_texts, run_grader, said
from tests.grader_cases import dialects
from tests.grader_cases import induction_head as capstone
from tests.grader_cases.implementations import ALTERNATIVES, REFERENCE, STUB_FORWARD, mutate

GRADED_ON_CASES = tuple(ex.id for ex in EXERCISES.values() if ex.kind != "model")  # the capstone: on models

ROOT = Path(__file__).resolve().parents[2]
CJK = re.compile(r"[\u4e00-\u9fff]")
# English texts that name a Chinese term on purpose (the interview mode's name, the capstone's heads)
ENGLISH_WITH_CHINESE = {"refused.forbidden", "mutant.previous_token_head"}
FULL_WIDTH = re.compile(r"[\uff08\uff09\uff0c\uff1a\uff1b\u3001]")  # （）、，：；


UNMAPPABLE = (
    "import torch\nclass MultiHeadAttention(torch.nn.Module):\n    def __init__(self, size, foo):\n"
    "        super().__init__()\n"
)


def load(src, name):
    ns = {"__name__": "learner"}
    exec(compile(src, "<learner>", "exec"), ns)
    return ns[name]


def assert_chinese(report: str):
    """Every line of a Chinese report has Chinese in it: no English sentence was left untranslated."""
    english = [line for line in report.splitlines() if line.strip() and not CJK.search(line)]
    assert not english, "untranslated:\n" + "\n".join(english) + "\n--- in ---\n" + report


def fields(template: str) -> set:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}


# ------------------------------------------------------------------------------------------------ the catalogue


def test_every_text_has_chinese():
    tables = grader_texts()
    assert {
        "course_utils.grade.messages",
        "course_utils.grade.sandbox.texts",
        "course_utils.grade.kinds.module",
    } <= set(tables) and all(get(ex).home in tables for ex in EXERCISES)
    missing = sorted(
        f"{home}: {key}"
        for home, table in tables.items()
        for key, (en, zh) in table.items()
        if key not in JOINS and not CJK.search(zh) and not frame(en, zh)
    )
    assert not missing, f"texts without Chinese: {missing}"
    for home, table in tables.items():
        for key, (en, zh) in table.items():
            extra = fields(zh) - fields(en) - ({"n"} if key == "label.step" else set())
            assert not extra, f"{home}: {key}: the Chinese uses {extra}, which the English does not have"
            if key not in ENGLISH_WITH_CHINESE and not key.startswith("case:"):
                assert not CJK.search(en), f"{home}: {key}: Chinese in the English text"


def frame(en: str, zh: str) -> bool:
    """A text that is only a frame around its parts (placeholders, code): its Chinese is its full-width punctuation."""
    return bool(zh) and zh != en and bool(FULL_WIDTH.search(zh))


def every_mutant():
    found = [
        m
        for ex in GRADED_ON_CASES
        for m in get(ex).mutants() + diagnose.mutant_pairs(get(ex).mutants(), get(ex).correct)
    ]
    found += [
        Mutant(m.key, m.message, None) for ex in EXERCISES for m in get(ex).how.mistakes + diagnose.VERDICT_MISTAKES
    ]
    return found + get("induction_head").mutants()


def test_every_mistake_has_chinese():
    missing = sorted(
        {
            f"{m.key}: {m.message}"
            for m in every_mutant()
            if not isinstance(m.message, Msg) or not CJK.search(m.message.render("zh"))
        }
    )
    assert not missing, "mistakes without Chinese:\n" + "\n".join(missing)
    pair = next(
        m for m in diagnose.mutant_pairs(get("mha").mutants(), get("mha").correct) if m.key == "scale_d_out+no_out_proj"
    )
    assert pair.message.render("zh") == (
        "两处错误：注意力分数除以了 √d_out（d_model），应当除以 √head_dim（head_dim = "
        "d_out // num_heads）；另外，缺少输出投影：合并多头之后还要经过 self.out_proj"
    )


def test_every_case_has_a_chinese_title():
    names = {(ex, c.name) for ex in EXERCISES for c in get(ex).make_cases(seed=0)}
    names |= {("mha_interview", c.name) for c in get("mha_interview").make_square_cases(seed=0)}
    missing = sorted(name for ex, name in names if not isinstance(get(ex).title(name), Msg))
    assert not missing, f"cases without a Chinese title: {missing}"


def test_chinese_spacing_and_english_value():
    m = Msg("compare.differs", label="lse", diff=2.5)
    assert m == "lse differs from the reference (max abs difference 2.5)" and isinstance(m, str)
    assert m.render("zh") == "lse 与参考实现不一致（最大绝对误差 2.5）"
    assert (
        Msg("compare.differs", label=Msg("label.out"), diff=2.5).render("zh")
        == "输出与参考实现不一致（最大绝对误差 2.5）"
    )
    step = Msg("label.step", step="step2", what=said("label.keys"))
    assert step == "step2: present keys" and step.render("zh") == "第 2 次调用的 present 中的键"
    with pytest.raises(ValueError, match="unknown language"):
        m.render("fr")


def test_the_child_says_keys_and_never_sees_the_grader(tmp_path):
    lib = jail.build_lib(tmp_path / "lib")
    shipped = {p.name for p in (lib / "sandbox").iterdir()}
    assert {"harness.py", "dialects.py", "texts.py", "kinds"} <= shipped and "messages.py" not in shipped
    child_code = "".join(path.read_text(encoding="utf-8") for path in (lib / "sandbox").rglob("*.py"))
    assert not re.search(r"^\s*(from|import) .*messages", child_code, re.M)
    # what comes back is only trusted when it is made of the child's own keys and says what the child said
    for home, table in grader_texts().items():  # every text of every module of the sandbox comes back as itself
        if home.startswith(texts.PACKAGE + "."):
            for key, (en, _) in table.items():
                form = {"home": home[len(texts.PACKAGE) + 1 :], "key": key, "args": {f: "x" for f in fields(en)}}
                back = from_child(form, texts.english(form))
                assert isinstance(back, Msg) and (back.home, back.key) == (home, key), (home, key)
    said = texts.said("no_class", name="GroupedQueryAttention")
    assert from_child(said, "no class GroupedQueryAttention found").render("zh") == "没有找到类 GroupedQueryAttention"
    assert from_child(said, "something else") == "something else" and not isinstance(from_child(said, "x"), Msg)
    for forged in (
        {"home": "texts", "key": "mutant.scale_d_out", "args": {}},  # not a text of the child's
        {"home": "../messages", "key": "result.passed", "args": {}},  # nor of a module outside the sandbox
        {"home": "harness", "key": "no_class", "args": {"name": "X"}},  # a module without texts
        {"key": "no_class", "args": {"name": "X"}},
        {"home": "texts", "key": "no_class", "args": {"name": 3}},
        {"home": "texts", "key": "no_class", "args": {}},
        {"home": "texts", "key": "no_class", "args": {"name": "X"}, "extra": 1},
        "text",
        {"home": "texts", "key": "list.semicolon", "args": {"items": [said] * 1000}},
    ):
        assert not isinstance(from_child(forged, texts.english(said)), Msg), forged


# ------------------------------------------------------------------------------------------------ reports


def as_learner(exercise, cases, variant) -> list:
    """Records of a learner whose module computes ``variant``: the grader's own mutant, run as a submission would
    be (fast: no learner code; the learner-style mutants are graded in test_grader_catalogue and _beyond)."""
    records = []
    for case in cases:
        outputs = diagnose.cached_outputs(get(exercise).expected, case, variant)
        if isinstance(outputs, Exception):
            error = {
                "type": type(outputs).__name__,
                "message": str(outputs),
                "line": None,
                "where": outputs.where,
                "step": outputs.step,
                "not_implemented": False,
                "contract": False,
            }
            records.append({"case": case.name, "error": error, "outputs": {}, "calls": []})
        else:
            outputs = {**outputs, "repeat.out": outputs.get("step1.out")}
            records.append({"case": case.name, "error": None, "outputs": outputs, "calls": []})
    return records


@pytest.mark.parametrize("exercise", GRADED_ON_CASES)
def test_mutant_reports_in_chinese(exercise):
    """Every mistake of the catalogue (and a few pairs), graded: its report in Chinese has no English line, and
    the English report is the one the grader always gave (English, and the same as the default)."""
    cases = get(exercise).make_cases(seed=3)
    mistakes = get(exercise).mutants() + diagnose.mutant_pairs(get(exercise).mutants(), get(exercise).correct)[::40]
    for mutant in mistakes:
        result = verdict(exercise, as_learner(exercise, cases, mutant.variant), cases)
        assert not result, mutant.key
        zh, en = result.report("zh"), result.report("en")
        assert_chinese(zh)
        assert en == result.report() == str(result)  # the default here is English, as before
        assert all(not CJK.search(line) or "手撕MHA" in line for line in en.splitlines()), en
        assert result.to_dict("zh")["messages"][0] == result.messages[0].render("zh")
        assert json.dumps(result.to_dict("en")) == json.dumps(result.to_dict())


def test_failure_paths_in_chinese():
    name = get("mha").contract
    reports = {
        "stub": grade_class("mha", load(STUB_FORWARD.format(name=name), name)),
        "undefined": grade_class("gqa", None),
        "contract": grade_class(
            "mha",
            load(
                REFERENCE["mha"].replace("self.W_key = nn.Linear(d_in, d_out", "self.W_key = nn.Linear(d_in, d_in"),
                name,
            ),
        ),
        "exception": grade_class(
            "mha",
            load(
                mutate(REFERENCE["mha"], {"MERGE": "ctx = (w @ v).transpose(1, 2).reshape(b, n, self.d_out + 1)"}), name
            ),
        ),
        "interview": grade_class("mha_interview", load(ALTERNATIVES["mha"]["sdpa"], name)),
        "delegates": grade_class("mha", cu.MultiHeadAttention),
        "dialect": grade_class("mha_interview", load(dialects.DIALECTS["hugging_face"], name)),
        "unmappable": grade_class("mha_interview", load(UNMAPPABLE, name)),
    }
    for result in reports.values():
        assert_chinese(result.report("zh"))
    assert "还没有实现：请写出 MultiHeadAttention" in reports["stub"].report("zh")
    assert "还没有实现：请定义类 GroupedQueryAttention" in reports["undefined"].report("zh")
    assert "接口约定：W_key.weight 的形状应为 (12, 4)，你的是 (4, 4)" in reports["contract"].report("zh")
    assert "forward 中出现 RuntimeError：shape" in reports["exception"].report("zh")
    assert "（你的代码第 " in reports["exception"].report("zh")
    assert "不得分：面试模式（手撕MHA）" in reports["interview"].report("zh")
    assert "按照构造参数为 (d_model, num_heads) 的写法评分；掩码约定：True = 保留" in reports["dialect"].report("zh")
    assert "面试模式接受这些写法：任何 nn.Module 类" in reports["unmappable"].report("zh")


def test_capstone_and_follow_ups_in_chinese(capsys):
    wrong = load(mutate(capstone.REFERENCE, capstone.MUTANTS[0][1]), "find_induction_head")
    results = [
        check("induction_head", wrong, lang="zh"),
        check("induction_head", None, lang="zh"),
        check_answers(
            {"kv_cache_bytes": 32 * 32 * 128 * 4096 * 2, "score_flops": 7, "grows_with_context": None}, lang="zh"
        ),
    ]
    out = capsys.readouterr().out
    assert_chinese(out)
    assert "前一词元头" in out and "用例「训练好的 checkpoint」：返回了" in out and "还没有实现：请定义函数" in out
    assert "这只是 K（或只是 V）" in out and "还没有作答" in out
    assert all(not r for r in results)


def test_submission_failures_in_chinese(tmp_path, monkeypatch):
    """Notes from the child (a syntax error, sys.exit, an exception, a %%bash cell, a cell that times out), a
    contract violation, a missing class and a cell that only names SDPA (no refusal: interview mode refuses what
    runs), all from one unsandboxed run of a notebook;
    then the sandbox's own failures (a timeout, a crash, an unreadable notebook)."""
    cells = [
        "def broken(:\n",
        "import sys\nsys.exit(1)\n",
        "1 / 0\n",
        "%%bash\necho hi\n",
        "while True:\n    pass\n",
        "import torch.nn.functional as F\nF.scaled_dot_product_attention\n",
        REFERENCE["mha"].replace("self.W_key = nn.Linear(d_in, d_out", "self.W_key = nn.Linear(d_in, d_in"),
    ]
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {"cell_type": "code", "metadata": {}, "source": s, "outputs": [], "execution_count": None} for s in cells
        ],
    }
    path = tmp_path / "submission.ipynb"
    path.write_text(json.dumps(nb))
    # 5 s per cell and per graded exercise: the looping cell is stopped by the child's alarm all the same, and every
    # other cell and exercise has the room it needs on a busy machine (1 s was not always enough)
    report = runner.grade_file(path, ["mha", "gqa", "mha_interview"], sandboxed=False, cell_timeout=5.0)
    zh = "\n".join([r.report("zh") for r in report.results] + [messages.text(n, "zh") for n in report.notes])
    assert_chinese(zh)
    for expected in (
        "单元格 0：SyntaxError",
        "调用了 sys.exit()",
        "ZeroDivisionError",
        "跳过了一个 %%bash 单元格",
        "超时了（是不是有死循环？）",
        "接口约定：W_key.weight 的形状应为",
        "没有找到类 GroupedQueryAttention",
    ):
        assert expected in zh, expected
    assert "scaled_dot_product_attention" not in zh  # cell 5 only names SDPA: interview mode refuses what runs
    assert json.dumps(report.to_dict("en")) == json.dumps(report.to_dict())

    outcome = jail.Outcome(-9, b"", "MemoryError\n", timed_out=True, too_big=False)
    monkeypatch.setattr(jail, "run", lambda *a, **k: outcome)
    timeout = runner.grade_file(tmp_path / "submission.ipynb", ["mha"], total_timeout=7)
    assert timeout.results[0].report("zh") == (
        "❌ mha：7 项检查通过了 0 项：评分被终止：计算超过了 7 秒，或总共超过了 28 秒（是不是有死循环？）"
    )
    outcome.timed_out = False
    crashed = runner.grade_file(tmp_path / "submission.ipynb", ["mha"])
    assert "这份提交在给出任何结果之前就结束了评分进程（退出码 -9），是不是内存不足？：MemoryError" in crashed.results[
        0
    ].report("zh")
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{not json")
    unreadable = runner.grade_file(bad, ["mha"])
    assert unreadable.to_dict("zh")["error"].startswith("bad.ipynb 不是有效的笔记本（JSON 格式错误：")


# ------------------------------------------------------------------------------------------------ the language


def test_check_speaks_the_course_language(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("ATTN_LANG", raising=False)
    wrong = load(mutate(REFERENCE["causal"], {"FILL": "pass"}), "CausalAttention")
    check("causal", wrong, lang="zh")
    assert "没有因果掩码：token 关注到了它后面的 token" in capsys.readouterr().out
    folder = tmp_path / "notebooks" / "zh-CN"
    folder.mkdir(parents=True)
    monkeypatch.chdir(folder)  # where Jupyter starts a Chinese notebook's kernel
    result = check("causal", wrong)
    out = capsys.readouterr().out
    assert out.startswith("❌ causal：") and "没有因果掩码" in out
    assert result.summary.startswith("❌ causal：") and str(result) == result.report("zh")
    monkeypatch.setenv("ATTN_LANG", "en")
    check("causal", wrong)
    assert "no causal mask: tokens attend to later tokens" in capsys.readouterr().out
    check("causal", wrong, lang="zh-CN")  # an explicit lang wins over everything
    assert "没有因果掩码" in capsys.readouterr().out


def test_unknown_language_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--lang", "xx", "anything.py"])
    assert exit_.value.code == 2 and "unknown language 'xx'" in capsys.readouterr().err


@pytest.mark.requires_sandbox
def test_cli_batch_in_chinese(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "alice.py").write_text(
        mutate(REFERENCE["mha"], {"SCALE": "scores = q @ k.transpose(2, 3) / math.sqrt(self.d_out)"})
    )
    (subs / "notes.txt").write_text("not a submission")
    proc = run_grader("--lang", "zh", "--batch", str(subs), "--out", str(tmp_path / "g"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "跳过了 notes.txt：不是提交文件（.py 或 .ipynb）" in proc.stdout and "评完了 1 份提交" in proc.stdout
    feedback = (tmp_path / "g" / "feedback" / "alice.py.md").read_text(encoding="utf-8")
    assert feedback.startswith("# alice.py 的评分反馈\n\n## mha：未通过（7 项检查通过了 ")
    assert_chinese(feedback)
    assert "注意力分数除以了 √d_out（d_model），应当除以 √head_dim" in feedback
    with open(tmp_path / "g" / "grades.csv", encoding="utf-8") as fh:
        (row,) = list(csv.DictReader(fh))
    # the columns keep their names for tools; the status in words, the machine key beside it
    assert list(row) == ["learner", "learner_key", "mha", "total", "max", "fraction", "status", "key", "feedback"]
    assert row["status"].startswith("mha：注意力分数除以了 √d_out") and row["key"] == "mha:scale_d_out"
    assert (tmp_path / "g" / "skipped.txt").read_text(encoding="utf-8") == "notes.txt：不是提交文件（.py 或 .ipynb）\n"


def test_batch_feedback_follows_lang():
    report = runner.SubmissionReport("x.py", results=[grade_class("gqa", None)])
    assert batch.feedback_markdown("x.py", report, "en").startswith("# Feedback for x.py\n\n## gqa: not passed (0/8")
    assert batch.feedback_markdown("x.py", report, "zh").startswith(
        "# x.py 的评分反馈\n\n## gqa：未通过（8 项检查通过了 0 项"
    )
    assert batch.status(report, "en") == "gqa: not implemented yet" and batch.status(report, "zh") == "gqa：还没有实现"
    assert batch.status_key(report) == "gqa:not_implemented"
