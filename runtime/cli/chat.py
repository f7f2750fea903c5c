"""``ternary chat MODEL``: an interactive terminal chat that streams tokens.

Commands: ``/reset`` starts a new conversation, ``/exit`` (or Ctrl-D) quits. Ctrl-C while the model
is answering stops that answer (the partial answer stays in the history) and returns to the prompt.
The engine keeps the conversation's KV cache, so each turn only prefills the new message.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from typing import Any, TextIO

from runtime.cli.generate import add_model_options, add_sampling_options, load_engine, settings_from_args

HELP = "Type a message. /reset starts over, /exit quits, Ctrl-C stops an answer."


def register(sub: Any) -> None:
    p = sub.add_parser("chat", help="interactive chat in the terminal",
                       description="Chat with a model in the terminal. " + HELP)
    add_model_options(p)
    add_sampling_options(p)
    p.add_argument("--stats", action="store_true", help="print speed statistics after each answer")
    p.set_defaults(func=run)


def chat_loop(engine: Any, settings: Any, read: Callable[[str], str], out: TextIO, system: str | None = None,
              show_stats: bool = False) -> int:
    """Run the conversation until /exit or end of input. ``read`` is ``input``-like (raises EOFError)."""
    from runtime.errors import ContextOverflowError
    from runtime.generation import CancelToken, DoneEvent, NoticeEvent, TextEvent

    def fresh() -> list[dict[str, str]]:
        return [{"role": "system", "content": system}] if system else []

    history = fresh()
    out.write(f"{engine.info.name} on {engine.info.device}, context {engine.info.context_length} tokens. {HELP}\n")
    out.flush()
    while True:
        try:
            line = read("> ")
        except EOFError:
            out.write("\n")
            return 0
        except KeyboardInterrupt:
            out.write("\n")
            continue
        text = line.strip()
        if not text:
            continue
        if text in ("/exit", "/quit"):
            return 0
        if text == "/reset":
            history = fresh()
            engine.reset()
            out.write("(new conversation)\n")
            continue
        if text.startswith("/"):
            out.write(f"unknown command {text.split()[0]}; {HELP}\n")
            continue
        history.append({"role": "user", "content": text})
        cancel = CancelToken()
        previous = _install_sigint(cancel)
        done = None
        channel = "answer"
        try:
            for ev in engine.generate(history, settings, cancel=cancel):
                if isinstance(ev, TextEvent):
                    if ev.channel != channel:
                        out.write("[thinking] " if ev.channel == "thinking" else "\n[answer] ")
                        channel = ev.channel
                    out.write(ev.text)
                    out.flush()
                elif isinstance(ev, NoticeEvent):
                    out.write(f"\n(note: {ev.message})\n")
                elif isinstance(ev, DoneEvent):
                    done = ev
        except ContextOverflowError as exc:
            history.pop()
            out.write(f"error: {exc}. Use /reset to start a new conversation.\n")
            continue
        finally:
            _restore_sigint(previous)
        assert done is not None
        if done.stats.finish_reason == "cancelled":
            out.write(" [stopped]")
        out.write("\n")
        if show_stats:
            st = done.stats
            out.write(f"({st.prompt_tokens} prompt + {st.generated_tokens} tokens, ttft {st.ttft_s:.2f} s, "
                      f"decode {st.decode_tok_s:.1f} tok/s)\n")
        history.append({"role": "assistant", "content": done.text})
        out.flush()


def _install_sigint(cancel: Any) -> Any:
    """Ctrl-C cancels the running answer instead of raising KeyboardInterrupt mid-matmul."""
    try:
        return signal.signal(signal.SIGINT, lambda signum, frame: cancel.cancel())
    except ValueError:  # not the main thread (tests calling chat_loop from a worker)
        return None


def _restore_sigint(previous: Any) -> None:
    if previous is not None:
        signal.signal(signal.SIGINT, previous)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    engine = load_engine(args)
    try:
        return chat_loop(engine, settings, input, sys.stdout, system=args.system, show_stats=args.stats)
    finally:
        engine.close()
