"""The Dining Philosophers table (DESIGN §2), ported from rollout/env.go so the
builder can play scripted episodes without the Go side."""

from __future__ import annotations

import random

from .prompts import INVALID, TOOL_NAMES, EnvConfig, State


class Table:
    def __init__(self, cfg: EnvConfig, rng: random.Random) -> None:
        self.cfg = cfg
        self.rng = rng
        self.owner = [-1] * cfg.n  # fork -> holder, -1 free
        self.snap = list(self.owner)
        self.meals = [0] * cfg.n
        self.last: list[tuple[str, bool] | None] = [None] * cfg.n
        self.round = 1
        self.stuck = 0
        self.done = False
        self.deadlocked = False

    def _left(self, i: int) -> int:
        return i

    def _right(self, i: int) -> int:
        return (i + 1) % self.cfg.n

    def observe(self, i: int) -> State:
        owner = self.snap if self.cfg.mode == "simultaneous" else self.owner
        lo, ro = owner[self._left(i)], owner[self._right(i)]
        return State(
            round=self.round,
            rounds=self.cfg.rounds,
            id=i,
            n=self.cfg.n,
            holding=(lo == i, ro == i),
            free=(lo < 0, ro < 0),
            meals=self.meals[i],
            table_meals=sum(self.meals),
            last=self.last[i],
        )

    def _release(self, i: int, fork: int) -> bool:
        if self.owner[fork] != i:
            return False
        self.owner[fork] = -1
        return True

    def _record(self, i: int, action: str, ok: bool) -> None:
        if action not in TOOL_NAMES:
            action, ok = INVALID, False
        self.last[i] = (action, ok)

    def resolve(self, actions: list[str]) -> list[bool]:
        """One simultaneous round: put-downs, eating on the snapshot, pick-ups."""
        n = self.cfg.n
        ok = [False] * n
        for i, a in enumerate(actions):
            if a == "put_down_left":
                ok[i] = self._release(i, self._left(i))
            elif a == "put_down_right":
                ok[i] = self._release(i, self._right(i))
        for i, a in enumerate(actions):
            if a == "eat" and self.snap[self._left(i)] == i and self.snap[self._right(i)] == i:
                self.meals[i] += 1
                ok[i] = True
        claim = [-1] * n
        for i, a in enumerate(actions):
            if a == "pick_up_left":
                f = self._left(i)
            elif a == "pick_up_right":
                f = self._right(i)
            else:
                continue
            if self.owner[f] >= 0:
                continue
            if claim[f] < 0 or self.rng.random() < 0.5:
                claim[f] = i
        for f, i in enumerate(claim):
            if i >= 0:
                self.owner[f] = i
                ok[i] = True
        for i, a in enumerate(actions):
            if a == "think":
                ok[i] = True
            self._record(i, a, ok[i])
        self.end_round()
        return ok

    def act(self, i: int, a: str) -> bool:
        """One philosopher's turn in sequential mode."""
        ok = False
        if a == "put_down_left":
            ok = self._release(i, self._left(i))
        elif a == "put_down_right":
            ok = self._release(i, self._right(i))
        elif a == "eat":
            if self.owner[self._left(i)] == i and self.owner[self._right(i)] == i:
                self.meals[i] += 1
                ok = True
        elif a in ("pick_up_left", "pick_up_right"):
            f = self._left(i) if a == "pick_up_left" else self._right(i)
            if self.owner[f] < 0:
                self.owner[f] = i
                ok = True
        elif a == "think":
            ok = True
        self._record(i, a, ok)
        return ok

    def _circular_wait(self) -> bool:
        for i in range(self.cfg.n):
            if self.owner[self._left(i)] < 0:
                return False
            if self.owner[self._left(i)] == i and self.owner[self._right(i)] == i:
                return False
        return True

    def end_round(self) -> None:
        if self.done:
            return
        self.stuck = self.stuck + 1 if self._circular_wait() else 0
        if self.stuck >= self.cfg.deadlock_patience:
            self.done, self.deadlocked = True, True
        elif self.round >= self.cfg.rounds:
            self.done = True
        else:
            self.round += 1
        self.snap = list(self.owner)
