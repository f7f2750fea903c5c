"""``ternary token set|clear|status hf|modelscope``: hub tokens in the OS keyring.

The token is read with ``getpass`` (never from argv, which lands in shell history and ``ps``).
Without a secure keyring the token is kept for this process only, and we say so.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("token", help="store or remove a Hugging Face / ModelScope access token (OS keyring)",
                       description="Tokens live in the system keyring (service 'ternary-chat'), never in files.")
    p.add_argument("action", choices=["set", "clear", "status"])
    p.add_argument("hub", nargs="?", choices=["hf", "huggingface", "modelscope", "ms"])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import getpass

    from runtime.hub.tokens import PROVIDERS, TokenStore, normalize_provider

    store = TokenStore()
    if args.action == "status":
        secure = store.secure_backend_available()
        print(f"keyring backend: {store.backend_name()} ({'secure' if secure else 'NOT secure: session only'})")
        for provider in PROVIDERS:
            print(f"{provider}: {'set' if store.get(provider) is not None else 'not set'}")
        return 0
    if not args.hub:
        print("error: say which hub: hf or modelscope", file=sys.stderr)
        return 2
    provider = normalize_provider(args.hub)
    if args.action == "clear":
        print(store.clear(provider))
        return 0
    value = getpass.getpass(f"{provider} token (input hidden): ")
    if not value.strip():
        print("error: empty token; nothing stored", file=sys.stderr)
        return 1
    print(store.set(provider, value))
    if not store.secure_backend_available():
        print("note: `ternary token set` in a separate command cannot pass a session-only token to later "
              "commands; set the environment variable for this shell instead "
              f"({'HF_TOKEN' if provider == 'huggingface' else 'MODELSCOPE_API_TOKEN'}).", file=sys.stderr)
    return 0
