"""Serve a published openpipe-art release's own `art run` app with a
recording backend, for grpo's ART tier (.ci/art.sh).

ART's cli.py, model.py, trajectories.py, types.py and dev/ are imported as
published: FastAPI validates every request with ART's own pydantic models.
Only LocalBackend is replaced: its methods keep their published signatures
(FastAPI reads them to parse the bodies) and their bodies record what they
receive. Training runs the release's own tokenize_trajectory_groups on what
arrived, with a tiny tokenizer built here (no hub download), as
LocalBackend._get_packed_tensors does before any GPU work. Everything
recorded goes to --record as one JSON object per line.

Heavy imports ART makes only for training (torch, unsloth, vLLM) are not
installed: a stand-in `torch` module satisfies dev/model.py's import, after
transformers has seen that torch is absent.

ART's vLLM is stood in for by a proxy to grpo's reference backend (`grpo
refmodel serve`), which answers with logprobs in vLLM's token_id:<n> form;
the proxy serves the registered model's name as ART does.

Usage: python harness.py --port P --refmodel URL --record FILE [--art-path DIR]
"""

import argparse
import ast
import importlib
import importlib.util
import inspect
import json
import math
import os
import sys
import threading
import traceback
import types
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# transformers decides once, at import, whether torch is present.
import transformers.debug_utils
import transformers.tokenization_utils_base
import transformers.trainer_utils
import transformers.training_args  # noqa: F401
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

torch = types.ModuleType("torch")
torch.Tensor = type("Tensor", (), {})  # annotations of TokenizedResult (0.5.1 on)
sys.modules.setdefault("torch", torch)

VOCAB = 2048  # above the reference backend's token ids (1000 and up)

# ChatML with tools and tool calls, close to Qwen's: the shape ART renders.
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\ntools {{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% elif m['content'] %}{% for p in m['content'] %}{{ p['text'] }}{% endfor %}{% endif %}"
    "{% for tc in m.get('tool_calls') or [] %} <tool_call> {{ tc['function']['name'] }}"
    " {{ tc['function']['arguments'] }} </tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer of VOCAB ids: <tN> for each id, unknown words
    as <unk>, and ChatML's markers as special tokens."""
    vocab = {f"<t{i}>": i for i in range(VOCAB)}
    vocab["<unk>"] = 0
    del vocab["<t0>"]
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
    )
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    fast.chat_template = CHAT_TEMPLATE
    return fast


class Recorder:
    """What the recording LocalBackend does: keeps ART's step per model and
    appends every call to the record file."""

    def __init__(self, path: str, inference_url: str) -> None:
        self.path = path
        self.inference_url = inference_url
        self.steps: dict[str, int] = {}
        self.lock = threading.Lock()
        self.tokenizer = tiny_tokenizer()
        self.tokenize = None  # found once art.local is the recording stand-in

    def write(self, entry: dict) -> None:
        with self.lock, open(self.path, "a") as f:
            f.write(json.dumps(entry, default=str) + "\n")

    async def call(self, name: str, args: dict):
        model = args.get("model")
        mname = getattr(model, "name", None)
        entry = {
            "call": name,
            "model": mname,
            "types": {k: type(v).__name__ for k, v in args.items()},
        }
        if model is not None and hasattr(model, "_internal_config"):
            entry["internal_config"] = model._internal_config
        if name == "register":
            self.steps.setdefault(mname, 0)
        elif name == "_get_step":
            entry["step"] = self.steps.get(mname, 0)
            self.write(entry)
            return entry["step"]
        elif name == "_prepare_backend_for_training":
            self.write(entry)
            return self.inference_url, "art-key"
        elif name == "_log":
            entry["groups"] = [len(g.trajectories) for g in args["trajectory_groups"]]
        self.write(entry)
        return None

    async def stream(self, name: str, args: dict):
        """_train_model: tokenize what arrived as ART would, record it, and
        stream two gradient steps; the first line's grad_norm is NaN, as
        Python's json.dumps writes a NaN metric."""
        model, groups = args["model"], args["trajectory_groups"]
        dev_config = dict(args.get("dev_config") or {})
        entry = {
            "call": name,
            "model": model.name,
            "internal_config": model._internal_config,
            "config": dict(args["config"]) if args.get("config") else None,
            "dev_config": dev_config,
        }
        entry["groups"] = [describe_group(g) for g in groups]
        try:
            results = self.tokenize(self.tokenizer, groups, dev_config)
            entry["tokenized"] = [
                {
                    "advantage": r.advantage,
                    "tokens": len(r.token_ids),
                    "trained": sum(r.assistant_mask),
                }
                for r in results
            ]
        except Exception as e:  # what ART would fail the step with
            entry["tokenize_error"] = f"{type(e).__name__}: {e}"
            entry["traceback"] = traceback.format_exc()
            self.write(entry)
            raise
        self.write(entry)
        if not entry["tokenized"]:
            return  # ART: "Skipping tuning as there is no suitable data"
        for i in range(2):
            yield {
                "loss": 0.5 - 0.25 * i,
                "grad_norm": math.nan if i == 0 else 0.5,
                "policy_loss": 0.5 - 0.25 * i,
                "entropy": 0.25,
                "num_gradient_steps": 2,
            }
        self.steps[model.name] = self.steps.get(model.name, 0) + 1


def describe_items(messages_and_choices) -> list:
    items = []
    for item in messages_and_choices:
        if isinstance(item, dict):
            items.append({"kind": "message", "role": item.get("role")})
        else:
            lp = item.logprobs.content if item.logprobs else None
            items.append(
                {
                    "kind": type(item).__name__,
                    "logprobs": len(lp or []),
                    "tokens": [c.token for c in lp or []][:4],
                }
            )
    return items


def describe_group(g) -> dict:
    out = []
    for t in g.trajectories:
        out.append(
            {
                "reward": t.reward,
                "items": describe_items(t.messages_and_choices),
                "histories": [
                    describe_items(h.messages_and_choices)
                    for h in t.additional_histories
                ],
                "metrics": dict(t.metrics),
                "metadata": dict(t.metadata),
            }
        )
    return {"trajectories": out}


def find_tokenizer():
    """The release's tokenize_trajectory_groups, called as its
    LocalBackend._get_packed_tensors calls it."""
    errors = []
    for mod in ("art.preprocessing.tokenize", "art.local.tokenize"):
        try:
            fn = importlib.import_module(mod).tokenize_trajectory_groups
            break
        except ImportError as e:
            errors.append(f"{mod}: {e}")
    else:
        raise ImportError("no tokenize_trajectory_groups: " + "; ".join(errors))
    params = inspect.signature(fn).parameters

    def run(tokenizer, groups, dev_config):
        kw = {}
        if "allow_training_without_logprobs" in params:
            kw["allow_training_without_logprobs"] = dev_config.get(
                "allow_training_without_logprobs", False
            )
        if "scale_rewards" in params:
            kw["scale_rewards"] = dev_config.get("scale_rewards", True)
        return list(fn(tokenizer, groups, **kw))

    return run


def art_dir() -> str:
    spec = importlib.util.find_spec("art")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "harness: no art package on the path (PYTHONPATH=<openpipe-art --target dir>)"
        )
    return spec.submodule_search_locations[0]


def install_local(recorder: "Recorder") -> None:
    """Makes art.local a package of the release's own files whose
    LocalBackend is the recording one. art/__init__ imports LocalBackend
    from 0.5.9 on, so a placeholder stands in until the recording class,
    which needs art's models, is built."""
    local = types.ModuleType("art.local")
    local.__path__ = [os.path.join(art_dir(), "local")]
    local.LocalBackend = type("LocalBackend", (), {})
    sys.modules["art.local"] = local
    importlib.import_module("art")
    local.LocalBackend = recording_backend(recorder)
    sys.modules["art"].LocalBackend = local.LocalBackend


def recording_backend(recorder: Recorder) -> type:
    """LocalBackend as published, every method's body replaced by a call to
    recorder (async generators stream from it)."""
    src_path = os.path.join(art_dir(), "local", "backend.py")
    with open(src_path) as f:
        tree = ast.parse(f.read())
    ns: dict = {
        "__name__": "art.local.backend",
        "__package__": "art.local",
        "__recorder__": recorder,
    }
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            try:  # keep the names the signatures use; skip training-only imports
                exec(compile(ast.Module([node], []), src_path, "exec"), ns)  # noqa: S102 (ART's own import line)
            except Exception:  # noqa: BLE001, S112 (torch, wandb, unsloth... are not installed)
                continue
    cls = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LocalBackend"
    )
    for fn in cls.body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        fn.decorator_list = [
            d
            for d in fn.decorator_list
            if isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod")
        ]
        # Annotations naming training-only types (ModelService, ...) go;
        # those FastAPI reads (ART's models, dev configs) resolve and stay.
        fn.returns = fn.returns if resolves(fn.returns, ns) else None
        for a in fn.args.args + fn.args.kwonlyargs:
            a.annotation = a.annotation if resolves(a.annotation, ns) else None
        gen = any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(fn))
        args = "{k: v for k, v in locals().items() if k != 'self'}"
        if fn.name == "__init__":
            body = "pass"
        elif isinstance(fn, ast.AsyncFunctionDef) and gen:
            body = (
                f"async for x in __recorder__.stream({fn.name!r}, {args}):\n    yield x"
            )
        elif isinstance(fn, ast.AsyncFunctionDef):
            body = f"return await __recorder__.call({fn.name!r}, {args})"
        else:
            body = "return None"
        fn.body = ast.parse(body).body
    cls.bases = [b for b in cls.bases if isinstance(b, ast.Name) and b.id in ns]
    module = ast.fix_missing_locations(ast.Module([cls], []))
    exec(compile(module, src_path, "exec"), ns)  # noqa: S102 (ART's class, bodies replaced)
    return ns["LocalBackend"]


def resolves(annotation, ns: dict) -> bool:
    if annotation is None:
        return True
    try:
        eval(compile(ast.Expression(annotation), "<annotation>", "eval"), ns)
        return True
    except Exception:  # noqa: BLE001 (a name from an import that was skipped)
        return False


class Proxy(BaseHTTPRequestHandler):
    """ART's vLLM: forwards to the reference backend, serving every model
    name ART registered as the reference backend's base model."""

    target = ""
    recorder: Recorder

    def do_GET(self) -> None:
        self.forward(None)

    def do_POST(self) -> None:
        self.forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def forward(self, body: bytes | None) -> None:
        asked = None
        if body:
            req = json.loads(body)
            if isinstance(req, dict) and "model" in req:
                asked = req["model"]
                req["model"] = "refmodel"
            body = json.dumps(req).encode()
        path = self.path.removeprefix("/v1")
        r = urllib.request.Request(self.target + path, data=body, method=self.command)
        r.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(r, timeout=120) as resp:
                code, data = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            code, data = e.code, e.read()
        if path.rstrip("/") == "/models" and code == 200:
            doc = json.loads(data)
            for name in self.recorder.steps:
                doc["data"].append({"id": name, "object": "model", "owned_by": "art"})
            data = json.dumps(doc).encode()
        if asked is not None:
            self.recorder.write(
                {"call": "inference", "path": path, "model": asked, "status": code}
            )
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--refmodel", required=True, help="the reference backend's /v1 URL")
    ap.add_argument("--record", required=True)
    ap.add_argument(
        "--dump-openapi", help="write the app's /openapi.json here and exit"
    )
    a = ap.parse_args()

    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    Proxy.target = a.refmodel.rstrip("/")
    recorder = Recorder(a.record, f"http://0.0.0.0:{proxy.server_address[1]}/v1")
    Proxy.recorder = recorder
    threading.Thread(target=proxy.serve_forever, daemon=True).start()

    install_local(recorder)
    recorder.tokenize = find_tokenizer()

    cli = importlib.import_module("art.cli")

    if a.dump_openapi:
        import uvicorn

        def capture(app, **_):
            with open(a.dump_openapi, "w") as f:
                json.dump(app.openapi(), f, indent=1, sort_keys=True)

        uvicorn.run = capture
    # ART's own command, `art run --host 127.0.0.1 --port P` (typer drops
    # the command's name while it is the only one).
    run = ["run"] if len(cli.app.registered_commands) > 1 else []
    sys.argv = ["art", *run, "--host", "127.0.0.1", "--port", str(a.port)]
    cli.app()


if __name__ == "__main__":
    main()
