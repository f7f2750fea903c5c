"""GUI test fixtures: offscreen Qt, isolated user dirs, a tiny real model loaded by the real engine.

The model is a random ternary Qwen3 (2 layers, vocab 300) written as a Hugging Face folder by
tests/model_factory.py once per session; every window loads it through the app's normal path
(``Engine.load`` via the worker), so these tests exercise the real runtime, not a double.
"""

from __future__ import annotations

import contextlib
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import keyring  # noqa: E402
import keyring.backends.fail  # noqa: E402
import pytest  # noqa: E402

from app.core.settings_model import AppSettings, SamplingSettings  # noqa: E402


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    """Every test gets its own TERNARY_CHAT_HOME; no real keyring, hub endpoint or token is used."""
    home = tmp_path / "home"
    monkeypatch.setenv("TERNARY_CHAT_HOME", str(home))
    for var in ("HF_TOKEN", "MODELSCOPE_API_TOKEN", "HF_ENDPOINT", "MODELSCOPE_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    previous = keyring.get_keyring()
    keyring.set_keyring(keyring.backends.fail.Keyring())
    yield home
    keyring.set_keyring(previous)
    from PySide6.QtWidgets import QApplication

    from app.main import install_translation

    if QApplication.instance() is not None:  # a test that switched the language live must not leak it
        install_translation(QApplication.instance(), "en")


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    from tests.model_factory import tiny_model_files

    _cfg, _model, _tok, folder = tiny_model_files(tmp_path_factory.mktemp("tiny-model"))
    return str(folder)


@pytest.fixture(scope="session")
def kb_model_path(tmp_path_factory) -> str:
    """The tiny test model with room for passages (4,096 positions instead of 512)."""
    from tests.model_factory import tiny_model_files

    return str(tiny_model_files(tmp_path_factory.mktemp("kb-model"), max_position_embeddings=4096)[3])


def settings_for(model_path: str, **sampling) -> AppSettings:
    """Settings that load the tiny model on the CPU with the given sampling overrides."""
    from app.main_window import model_key

    s = AppSettings()
    s.hardware.device = "cpu"
    s.set_sampling(model_key(model_path), SamplingSettings(**sampling))
    return s


@contextlib.contextmanager
def window_maker(qtbot, model_path: str, max_new_tokens: int):
    """``make(load=True, settings=None, **sampling)`` -> a shown MainWindow on ``model_path``, model
    loaded if asked; every window made is closed on exit (shared by the GUI fixtures)."""
    from app.main_window import MainWindow

    windows = []

    def make(load: bool = True, settings: AppSettings | None = None, **sampling):
        if settings is None:
            settings = settings_for(model_path, **({"seed": 1, "max_new_tokens": max_new_tokens} | sampling))
        w = MainWindow(settings=settings, autoload=False)
        qtbot.addWidget(w)
        w.show()
        windows.append(w)
        if load:
            with qtbot.waitSignal(w.modelLoaded, timeout=120_000):
                w.load_model(model_path)
        return w

    try:
        yield make
    finally:
        for w in windows:
            if w.isVisible() or w.host.thread.isRunning():
                w.close()


@pytest.fixture
def make_window(qtbot, tiny_model_path):
    """``make_window(load=True, settings=None)`` -> a shown MainWindow, model loaded if asked."""
    with window_maker(qtbot, tiny_model_path, 12) as make:
        yield make
