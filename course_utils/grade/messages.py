"""Everything the grader tells a learner or an instructor, in English and in Chinese (中文), as texts by key.

``Msg(key, **args)`` is one such text. It is a ``str`` whose value is the English, so that printing it and comparing
it work as they always did; ``render(lang)`` gives the text in either language. The verdict never reads a message's
words: it decides on keys and data, and only then says it. Arguments are numbers (formatted by the template, e.g.
``{diff:.3g}``), plain strings (identifiers, shapes, the learner's own exception text: never translated), or other
``Msg``, rendered in the same language. Texts made of several parts are keys of their own (``two_mistakes``,
``detail.case``, the ``list.*`` joins), never translated strings glued together, so that Chinese can order the parts
as Chinese does.

Each text is data of the module that says it: its ``TEXTS``, key -> (English, Chinese). ``Msg(key)`` made in a module
takes that module's own text for ``key`` first, else the shared one here (``TEXTS`` below: a result, comparing outputs,
errors, the verdict's frame); ``said_in(home, key)`` takes another module's by name (an exercise's mistake, made where
the verdict is computed: ``Mistake.message``; a case's title: ``case_title``). A msg keeps its home and key, so that it
is rendered, copied and pickled from its home's data, never from a catalogue assembled at import. The sandboxed
child does not import this module: it says its texts as keys and arguments (``sandbox/texts.py``), and
``child.from_child`` turns what it sent into a ``Msg``. Languages: ``course_utils.lang``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from ..lang import current_language, normalize_language
from .sandbox.texts import JOINS
from .spacing import fill_zh

Table = Mapping[str, tuple[str, str]]  # a module's texts: key -> (English template, Chinese template)

# the texts several modules share, key -> (English template, Chinese template)
TEXTS: dict[str, tuple[str, str]] = {
    # ---------------------------------------------------------------------------------------- a result
    "result.passed": ("✅ {exercise}: all {total} checks passed", "✅ {exercise}：{total} 项检查全部通过"),
    "result.failed": (
        "❌ {exercise}: {passed}/{total} checks passed: {first}",
        "❌ {exercise}：{total} 项检查通过了 {passed} 项：{first}",
    ),
    "result.no_reason": ("failed", "未通过"),
    "result.assumed": ("({assumed})", "（{assumed}）"),
    # ---------------------------------------------------------------------------------------- not implemented
    "not_implemented.write": (
        "not implemented yet: write {name} (it raises NotImplementedError)",
        "还没有实现：请写出 {name}（它现在会抛出 NotImplementedError）",
    ),
    "not_implemented.write_all": (
        "not implemented yet: write {names} (they raise NotImplementedError)",
        "还没有实现：请写出 {names}（它们现在会抛出 NotImplementedError）",
    ),
    "not_implemented.define_function": ("not implemented yet: define function {name}", "还没有实现：请定义函数 {name}"),
    # ---------------------------------------------------------------------------------------- comparing outputs
    "label.out": ("the output", "输出"),
    "label.step": ("{step}: {what}", "第 {n} 次调用的{what}"),
    "compare.not_none": ("{label} must be None when use_cache=False", "use_cache=False 时{label}必须是 None"),
    "compare.missing": ("{label} is missing", "缺少{label}"),
    "compare.none": ("{label} is None, expected a tensor of shape {shape}", "{label}是 None，应为形状 {shape} 的张量"),
    "compare.not_tensor": (
        "{label} is {got}, expected a tensor of shape {shape}",
        "{label}是 {got}，应为形状 {shape} 的张量",
    ),
    "compare.shape": (
        "{label} has shape {got} but the contract needs {need}{extra}",
        "{label}形状为 {got}，但接口约定要求 {need}{extra}",
    ),
    "compare.nan": ("{label} contains NaN", "{label}中出现了 NaN"),
    "compare.differs": (
        "{label} differs from the reference (max abs difference {diff:.3g})",
        "{label}与参考实现不一致（最大绝对误差 {diff:.3g}）",
    ),
    "compare.differs_up_to": (
        "{label} differs from the reference (max abs difference up to {diff:.3g})",
        "{label}与参考实现不一致（最大绝对误差最高 {diff:.3g}）",
    ),
    "compare.nonfinite": (
        "{label} is {got} where the reference is {need} (at {count} of its {total} numbers, the "
        "first at index {index})",
        "{label}在参考实现为 {need} 的位置上是 {got}（{total} 个数里有 {count} 个这样，第一个在下标 {index}）",
    ),
    # ---------------------------------------------------------------------------------------- errors, refusals
    "where.construct": ("constructing the module", "构造模块时"),
    "where.load": ("loading the grader's parameters", "载入评分器的参数时"),
    "where.forward": ("forward", "forward 中"),
    "where.backward": ("the backward pass", "反向传播时"),
    "error.contract": ("contract: {message}", "接口约定：{message}"),
    "error.in": ("{type} in {where}: {message}", "{where}出现 {type}：{message}"),
    "error.in_line": ("{type} in {where}: {message} (your {line})", "{where}出现 {type}：{message}（你的代码{line}）"),
    "error.plain": ("{type}: {message}", "{type}：{message}"),
    "error.plain_line": ("{type}: {message} (your {line})", "{type}：{message}（你的代码{line}）"),
    "refusal.calls_course": ("calls course_utils' reference code ({call})", "调用了 course_utils 的参考实现（{call}）"),
    "refused.delegates": (
        "no credit: the submission delegates to course_utils' reference implementation: {first}",
        "不得分：提交的代码直接用了 course_utils 的参考实现：{first}",
    ),
    # ---------------------------------------------------------------------------------------- the verdict
    "detail.every_case": ("every case: {why}", "所有用例：{why}"),
    "detail.case": ("case '{case}': {why}", "用例「{case}」：{why}"),
    "detail.cases": ("{count} of {total} cases: {why}", "{total} 个用例中的 {count} 个：{why}"),
    "wrong_shape": ("wrong output shape: {why}", "输出形状不对：{why}"),
    "wrong_values": (
        "outputs differ from the reference, and match no known mistake; compare your steps with the notebook's",
        "输出与参考实现不一致，也对不上任何已知的常见错误；请对照笔记本逐步检查你的计算",
    ),
    "two_mistakes": ("two mistakes: {first}; and {second}", "两处错误：{first}；另外，{second}"),
}

TEXTS.update(JOINS)  # "; " and "；", ", " and "、": see joined()


def resolve(lang: str | None = None) -> str:
    """'en' or 'zh': ``lang`` normalized, or the course's current language when None."""
    return normalize_language(lang) if lang else current_language()


def table(home: str) -> Table:
    """The texts of the module ``home`` (its ``TEXTS``)."""
    module = sys.modules.get(home) or importlib.import_module(home)
    return module.TEXTS


class Msg(str):
    """A text by key: ``str(msg)`` is the English, ``msg.render("zh")`` the Chinese, ``msg.home`` the module whose
    ``TEXTS`` hold it."""

    key: str
    args: dict[str, Any]
    home: str

    def __new__(cls, key: str, /, **args: Any) -> Msg:
        caller = sys._getframe(1).f_globals  # the module that says it: its own text first, else the shared one
        own = caller.get("TEXTS")
        home = caller["__name__"] if isinstance(own, Mapping) and key in own else __name__
        return cls.said_in(home, key, **args)

    @classmethod
    def said_in(cls, home: str, key: str, /, **args: Any) -> Msg:
        """The text ``key`` of the module ``home``."""
        if key not in table(home):
            raise KeyError(f"no text {key!r} in {home}")
        self = super().__new__(cls, _render(home, key, args, "en"))
        self.key, self.args, self.home = key, args, home
        return self

    @property
    def texts(self) -> tuple[str, str]:
        """Its (English, Chinese) templates."""
        return table(self.home)[self.key]

    def render(self, lang: str | None = None) -> str:
        lang = resolve(lang)
        return str.__str__(self) if lang == "en" else _render(self.home, self.key, self.args, lang)

    def __reduce__(self):  # pickling and deep copies (dataclasses.asdict) keep the home, key and arguments
        return (_rebuild, (self.home, self.key, self.args))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


def _rebuild(home, key, args):
    return Msg.said_in(home, key, **args)


def said_in(home: str, key: str, /, **args: Any) -> Msg:
    """The text ``key`` of the module ``home`` (a module's name), as a ``Msg``."""
    return Msg.said_in(home, key, **args)


def text(value, lang: str | None = None):
    """``value`` in ``lang``: a Msg rendered, anything else as it is (a plain string has no translation)."""
    return value.render(lang) if isinstance(value, Msg) else value


def joined(items: Iterable[Any], sep: str = ";") -> Msg:
    """The items as one text, joined by '; ' (sep=';') or ', ' (sep=',') in English, and by '；' or '、' in Chinese."""
    return Msg("list.semicolon" if sep == ";" else "list.comma", items=list(items))


def case_title(name: str, homes: Iterable[str] = ()) -> Msg | str:
    """A case's name as a text: ``case:<name>`` of the first of ``homes`` (modules) that holds it; a name none
    holds stays as it is."""
    for home in homes:
        if "case:" + name in table(home):
            return said_in(home, "case:" + name)
    return name


def _value(v, lang):
    return v.render(lang) if isinstance(v, Msg) else v


def _render(home, key, args, lang) -> str:
    if key in JOINS:
        return JOINS[key][lang == "zh"].join(str(_value(item, lang)) for item in args["items"])
    en, zh = table(home)[key]
    if key.startswith("case:"):  # a case's title is shown as it is written: its braces are not placeholders
        return zh if lang == "zh" and zh else en
    values = {name: _value(v, lang) for name, v in args.items()}
    if lang != "zh" or not zh:
        return en.format(**values)
    if key == "label.step":  # "step3" -> 第 3 次调用的...
        values["n"] = values["step"][4:] if values["step"].startswith("step") else values["step"]
    return fill_zh(zh, values)
