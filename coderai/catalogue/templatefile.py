"""A catalogue entry's own chat template (its `chat_template` option), for a model that
ships none or ships a wrong one: a Jinja template given inline, or the path of a file
holding one, as llama.cpp's `--chat-template` and `--chat-template-file` take them.

The front reads a file and checks that the template compiles when the catalogue is loaded
or saved, and engines are sent the text: an engine may run on another machine, and a
template that cannot be used is the catalogue's error, not a request's.
"""

from __future__ import annotations

import functools
import os
import stat
from typing import Any

from coderai.errors import ConfigError

#: the option's name in a catalogue entry and in the model spec an engine gets
TEMPLATE_OPTION = "chat_template"
#: the largest template file read (real templates are tens of kilobytes at most)
MAX_BYTES = 1 << 20


def is_inline(value: str) -> bool:
    """A template written out (it has a Jinja tag or expression), not a file's path."""
    return "{%" in value or "{{" in value


def template_text(value: str) -> str:
    """The template a value gives, checked to compile: the value itself, or the file it
    names (a relative path is read from the working directory, as a model's `path` is)."""
    if is_inline(value):
        check(value, "the template")
        return value
    text = read_file(value)
    check(text, f"chat template file {value}")
    return text


def read_file(path: str) -> str:
    """A template file's text. Its kind is read with stat before it is opened: opening a
    FIFO waits for a writer."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ConfigError(f"chat template file {path} is not a regular file")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the stat
                raise ConfigError(f"chat template file {path} is not a regular file")
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read chat template file {path}: {exc.strerror}") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(f"chat template file {path} is larger than {MAX_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"chat template file {path} is not UTF-8 text") from None


def check(text: str, what: str) -> None:
    """A ConfigError naming `what` and the first problem, unless the template compiles as
    both backends compile one."""
    import jinja2

    try:
        _environment().from_string(text)
    except jinja2.TemplateError as exc:
        line = getattr(exc, "lineno", None)
        where = f" (line {line})" if line else ""
        raise ConfigError(f"{what} does not compile: {exc.message or exc!r}{where}") from None


@functools.cache
def _environment() -> Any:
    """Jinja as transformers and llama-cpp-python set it up for chat templates: sandboxed,
    with loop controls and Hugging Face's `{% generation %}` tag."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """`{% generation %}…{% endgeneration %}` marks what the assistant wrote; the
        template's text is what it wraps."""

        tags = {"generation"}  # noqa: RUF012 - jinja2 declares it so

        def parse(self, parser: Any) -> Any:
            parser.stream.skip(1)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    return ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
