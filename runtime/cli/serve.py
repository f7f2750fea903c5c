"""``ternary serve MODEL``: an OpenAI- and Anthropic-compatible API server on this machine.

Listens first (requests get 503 "loading" until the model is ready), then loads the model, then
serves until Ctrl-C. On a GPU ``--max-batch N`` decodes up to N requests together (continuous batching);
otherwise requests run one at a time. Others queue (``--max-queue``). See docs/server.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path
from typing import Any

from runtime.cli.generate import add_model_options, load_engine
from runtime.errors import UnsupportedModelError
from runtime.sampling_params import cli_int


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve the model over an OpenAI/Anthropic-compatible HTTP API",
                       description="Serve a model at /v1/chat/completions, /v1/completions, /v1/messages, "
                                   "/v1/models and /health. Binds 127.0.0.1 unless --host says otherwise; "
                                   "any other address needs an API key (--api-key-env).")
    add_model_options(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, this machine only)")
    p.add_argument("--port", type=cli_int(0, 65535, "--port"), default=8731, help="port (default 8731)")
    p.add_argument("--api-key-env", metavar="VAR",
                   help="name of the environment variable that holds the API key clients must send")
    p.add_argument("--max-batch", type=cli_int(1, 64, "--max-batch"), default=1, metavar="N",
                   help="requests decoded together on a GPU (continuous batching; default 1). Each gets --ctx "
                        "tokens of context, or less when N of them do not fit; on a CPU requests run one at a time")
    p.add_argument("--max-queue", type=cli_int(0, 100_000, "--max-queue"), default=16, metavar="N",
                   help="requests that may wait behind the running ones; more get 429 (default 16)")
    p.add_argument("--max-tokens-limit", type=cli_int(1, 262_144, "--max-tokens-limit"), default=8192, metavar="N",
                   help="the largest max_tokens a request may ask for (default 8192)")
    p.add_argument("--max-body-bytes", type=cli_int(1024, 1 << 30, "--max-body-bytes"), default=4 * 1024 * 1024,
                   metavar="N", help="largest request body (default 4 MiB)")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="allow browser pages from ORIGIN (repeatable; default: CORS off)")
    p.add_argument("--model-id", metavar="NAME", help="model name clients use (default: the model file's stem)")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> Any:
    from runtime.server import ServerConfig, ServerError

    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise ServerError(f"the environment variable {args.api_key_env} is not set or empty")
    return ServerConfig(host=args.host, port=args.port, api_key=key, max_queue=args.max_queue, max_batch=args.max_batch,
                        max_body_bytes=args.max_body_bytes, max_tokens_limit=args.max_tokens_limit,
                        cors_origins=list(args.cors_origin), model_id=args.model_id)


def model_id_for(path: str) -> str:
    p = Path(path)
    return (p.name if p.is_dir() else p.stem) or "model"


def run(args: argparse.Namespace) -> int:
    from runtime.server import EngineAccess, start_server
    from runtime.server.config import check_config

    config = config_from_args(args)
    check_config(config)  # before the (slow) model load
    access = EngineAccess(None, config.model_id or model_id_for(args.model))
    handle = start_server(access, config)
    print(f"listening on {handle.url} (loading {args.model}...)", file=sys.stderr, flush=True)
    try:
        engine = load_engine(args)
        scheduling = "one request at a time"
        if args.max_batch > 1:
            try:
                batch = engine.enable_batching(args.max_batch, args.ctx)
            except UnsupportedModelError as exc:
                print(f"note: {exc}", file=sys.stderr, flush=True)
            else:
                assert batch is not None
                scheduling = f"up to {batch.max_batch} requests at once, {batch.context} tokens of context each"
        access.set_engine(engine)
        print(f"ready: model '{access.model_id}' on {engine.info.device}, context {engine.info.context_length} "
              f"tokens, {scheduling}; OpenAI base URL {handle.url}/v1 (Ctrl-C stops)", file=sys.stderr, flush=True)
        threading.Event().wait()
    except KeyboardInterrupt:
        print("stopping", file=sys.stderr)
    finally:
        handle.stop()
    return 0
