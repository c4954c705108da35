"""Check what a release's real `art run` app received from `grpo run`
(.ci/art.sh): the record written by harness.py.

Usage: python check.py RECORD RELEASE RANK
Prints one summary line last; exits 1 on the first failed check.
"""

import json
import sys


def main() -> None:
    path, release, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(path) as f:
        entries = [json.loads(line) for line in f]
    calls = [e["call"] for e in entries]
    fail = []

    def check(ok: bool, msg: str) -> None:
        if not ok:
            fail.append(msg)

    check("register" in calls, "no /register")
    trains = [e for e in entries if e["call"] == "_train_model"]
    check(len(trains) == 2, f"{len(trains)} /_train_model calls, want 2")
    trajectories = tokenized = histories = 0
    for i, t in enumerate(trains, 1):
        where = f"train {i}"
        check(
            "tokenize_error" not in t,
            f"{where}: ART's tokenizer failed: {t.get('tokenize_error')}",
        )
        ic = t.get("internal_config") or {}
        check(
            ic.get("init_args", {}).get("max_lora_rank") == rank,
            f"{where}: init_args {ic.get('init_args')}, want max_lora_rank {rank}",
        )
        check(
            ic.get("peft_args", {}).get("r") == rank,
            f"{where}: peft_args {ic.get('peft_args')}, want r {rank}",
        )
        check(len(t["groups"]) > 0, f"{where}: no trajectory groups")
        for gi, g in enumerate(t["groups"]):
            rewards = [tr["reward"] for tr in g["trajectories"]]
            check(len(rewards) > 0, f"{where} group {gi}: empty")
            # grpo sends its advantages as rewards, centred to sum exactly 0.
            check(
                sum(rewards) == 0,
                f"{where} group {gi}: rewards {rewards} do not sum to exactly 0",
            )
            if "scale_rewards" in t["dev_config"]:
                check(
                    t["dev_config"]["scale_rewards"] is False,
                    f"{where}: dev_config {t['dev_config']}",
                )
                check(
                    all(r != 0 for r in rewards),
                    f"{where} group {gi}: a zero advantage sent to a release that skips it",
                )
            for tr in g["trajectories"]:
                trajectories += 1
                check(
                    "grpo_reward" in tr["metrics"] and "grpo_episode" in tr["metadata"],
                    f"{where}: metrics {tr['metrics']} metadata {tr['metadata']}",
                )
                # Split into histories (up to 0.4.7), each history holds
                # exactly one sampled choice, the additional ones as their
                # last item; otherwise the one history holds every turn.
                for h, items in enumerate([tr["items"], *tr["histories"]]):
                    choices = [it for it in items if it["kind"] != "message"]
                    want = "one" if tr["histories"] else "at least one"
                    check(
                        len(choices) == 1 or not tr["histories"] and len(choices) > 1,
                        f"{where}: history {h} has {len(choices)} sampled choices, want {want}: {items}",
                    )
                    check(
                        h == 0 or items[-1]["kind"] != "message",
                        f"{where}: history {h} does not end with its choice: {items}",
                    )
                    histories += 1
                    for c in choices:
                        check(
                            c["kind"] == "Choice",
                            f"{where}: a sampled choice parsed as {c['kind']}, want Choice",
                        )
                        check(
                            c["logprobs"] > 0
                            and all(tok.startswith("token_id:") for tok in c["tokens"]),
                            f"{where}: choice logprobs {c}",
                        )
        tokenized += len(t.get("tokenized", []))
        check(
            len(t.get("tokenized", [])) > 0,
            f"{where}: ART's tokenizer produced nothing to train",
        )
    infer = [e for e in entries if e["call"] == "inference"]
    check(
        len(infer) > 0 and all(e["status"] == 200 for e in infer),
        f"inference requests answered {sorted({e['status'] for e in infer})}",
    )
    if fail:
        for f in fail[:20]:
            print(f"check {release}: {f}")
        sys.exit(1)
    print(
        f"{len(trains)} training calls, {trajectories} trajectories, {histories} histories, {tokenized} sequences tokenized by ART, {len(infer)} chat requests"
    )


if __name__ == "__main__":
    main()
