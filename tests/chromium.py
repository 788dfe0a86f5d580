"""Headless Chromium (Debian's ``chromium`` package) for the report tests and the README's pictures.

One short-lived browser per call, with a fresh profile in a temporary folder and everything that
would reach the network turned off; the process is always waited for (or killed on timeout).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

__all__ = ["Element", "chromium", "dump_dom", "elements", "screenshot"]

_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
          "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
          "--disable-default-apps", "--mute-audio", "--hide-scrollbars"]


def chromium() -> str | None:
    """The browser's executable, or None when it is not installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    exe = chromium()
    if exe is None:
        raise RuntimeError("chromium is not installed (bash tests/run.sh installs it)")
    with tempfile.TemporaryDirectory(prefix="mf-chromium-") as profile:
        proc = subprocess.Popen([exe, *_FLAGS, f"--user-data-dir={profile}", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def dump_dom(page: Path, fragment: str = "", *, width: int = 1100, height: int = 900, timeout: float = 120) -> str:
    """The DOM of ``page`` after its scripts ran (``--dump-dom``), opened as ``file://...#fragment``."""
    url = page.resolve().as_uri() + (f"#{fragment}" if fragment else "")
    proc = _run([f"--window-size={width},{height}", "--dump-dom", url], timeout)
    if proc.returncode != 0 or "<html" not in proc.stdout:
        raise RuntimeError(f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout


def screenshot(page: Path, out: Path, *, width: int = 1000, height: int = 800, fragment: str = "",
               timeout: float = 120) -> None:
    """A PNG of the top ``width`` x ``height`` pixels of ``page``."""
    url = page.resolve().as_uri() + (f"#{fragment}" if fragment else "")
    proc = _run([f"--window-size={width},{height}", f"--screenshot={out.resolve()}", url], timeout)
    if proc.returncode != 0 or not out.is_file():
        raise RuntimeError(f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}")


class Element:
    """One element of a dumped DOM: its tag, attributes and text."""

    def __init__(self, tag: str, attrs: dict[str, str]) -> None:
        self.tag, self.attrs, self.text = tag, attrs, ""

    def __repr__(self) -> str:
        return f"<{self.tag} {self.attrs.get('data-kind')} {self.attrs.get('data-locus')}>"


class _Collect(HTMLParser):
    _VOID = {"img", "br", "hr", "meta", "input", "link", "source", "area", "col", "embed", "wbr", "base"}

    def __init__(self, attr: str) -> None:
        super().__init__(convert_charrefs=True)
        self.attr, self.found, self.open = attr, [], []  # type: ignore[var-annotated]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        element = Element(tag, values) if self.attr in values else None
        if element is not None:
            self.found.append(element)
        if tag not in self._VOID:
            self.open.append((tag, element))

    def handle_endtag(self, tag: str) -> None:
        while self.open:
            name, _ = self.open.pop()
            if name == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, element in self.open:
            if element is not None:
                element.text += data


def elements(dom: str, attr: str) -> list[Element]:
    """Every element of ``dom`` that has the attribute ``attr``, in document order."""
    parser = _Collect(attr)
    parser.feed(dom)
    return parser.found
