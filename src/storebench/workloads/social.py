"""``social``: agdb's social-network simulation.

Users are created first (one per writer). Then, all at once: posters write
posts, commenters comment on the latest post, post readers read the most
recent posts, comment readers read the most recent comments on the latest
post, each pausing between operations. Every operation is timed as one
transaction (a comment = find the latest post + insert the comment with its
reference). At the end: the database size, then the size after compaction.

Two modes (the record says which ran):

- default (corrected): each actor pauses the configured delay after every
  operation, actors start spread over one delay period (so they do not all
  fire in the same millisecond), and a read that finds nothing yet is not
  counted as a read (it is recorded under ``skipped``).
- compat: agdb's actual behaviour: actor i pauses ``delay_ms % (i + 1)``
  (so readers average ~17 ms and some never pause) and a read that finds
  nothing retries inside the same timed operation until data exists.

One module on purpose: the actors, both modes and the run's
tasks share one schedule; apart, compat's rules would sit away from the
behaviour they alter.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import Cmp
from storebench.driver import Op, Task
from storebench.driver.choice import choose_executor
from storebench.errors import NotCounted, TaskFailed, UserError
from storebench.stores.base import AsyncView, Capability, Collection, Store
from storebench.workloads.base import BatchInserts, MemoryNeed, Params, TimeModel, ViewsOp, Workload

if TYPE_CHECKING:
    from storebench.workloads.base import RunContext

SEQ = "seq"
_CLIENT_BYTES = 128 << 10  # a client thread's stack in use and its operation's objects


class SocialParams(Params):
    posters: int = Field(10, ge=0)
    posts: int = Field(100, ge=1, description="posts per poster")
    post_delay_ms: int = Field(100, ge=0)
    title: str = Field("Title of the testing post", min_length=1)
    body: str = Field("Body of the testing post should be longer than the title", min_length=1)
    commenters: int = Field(10, ge=0)
    comments: int = Field(100, ge=1, description="comments per commenter")
    comment_delay_ms: int = Field(100, ge=0)
    comment: str = Field("This is a testing comment of a post.", min_length=1)
    post_readers: int = Field(100, ge=0)
    post_reads: int = Field(100, ge=1, description="reads per post reader")
    posts_per_read: int = Field(10, ge=1)
    post_read_delay_ms: int = Field(100, ge=0)
    comment_readers: int = Field(100, ge=0)
    comment_reads: int = Field(100, ge=1, description="reads per comment reader")
    comments_per_read: int = Field(10, ge=1)
    comment_read_delay_ms: int = Field(100, ge=0)
    scale: int = Field(1, ge=1, description="multiplies every kind of user (agdb's 10x)")
    max_wait_s: float = Field(
        1.0, gt=0, description="compat: seconds a read repeats waiting for data before giving up"
    )

    def actors(self) -> list[tuple[str, int, int, int, int]]:
        """Each kind of actor (its task): clients (scaled), operations each,
        the pause after each (ms), and items an operation reads."""
        s = self.scale
        return [
            ("write_posts", self.posters * s, self.posts, self.post_delay_ms, 1),
            ("write_comments", self.commenters * s, self.comments, self.comment_delay_ms, 1),
            (
                "read_posts",
                self.post_readers * s,
                self.post_reads,
                self.post_read_delay_ms,
                self.posts_per_read,
            ),
            (
                "read_comments",
                self.comment_readers * s,
                self.comment_reads,
                self.comment_read_delay_ms,
                self.comments_per_read,
            ),
        ]


USERS = Schema({"name": "str", "email": "str"})


def post_schema(users: str) -> Schema:
    return Schema(
        {SEQ: "int", "author": "int", "title": "str", "body": "str"},
        indexed=(SEQ,),
        refs={"author": users},
    )


def comment_schema(users: str, posts: str) -> Schema:
    return Schema(
        {SEQ: "int", "post": "int", "author": "int", "body": "str"},
        indexed=(SEQ, "post"),
        refs={"post": posts, "author": users},
    )


def _one(seq: int, **fields: Any) -> DocBatch:
    cols = {
        k: np.array([v], dtype=np.int64 if isinstance(v, int) else object)
        for k, v in fields.items()
    }
    return DocBatch(np.array([seq], np.int64), {SEQ: np.array([seq], np.int64), **cols})


class _Latest:
    """Finds the latest post; compat retries until one exists."""

    def __init__(self, posts: Collection, retry: bool, wait_s: float):
        self.find = posts.find
        self.retry = retry
        self.wait_s = wait_s
        self.order = (SEQ, True)

    def __call__(self, limit: int = 1) -> DocBatch:
        got = self.find(None, self.order, limit)
        if len(got):
            return got
        if not self.retry:
            raise NotCounted("no post yet")
        return retry_until(lambda: self.find(None, self.order, limit), self.wait_s, "post")

    def opened(self, posts: AsyncView) -> None:
        self.afind = posts.find

    async def acall(self, limit: int = 1) -> DocBatch:
        got = await self.afind(None, self.order, limit)
        if len(got):
            return got
        if not self.retry:
            raise NotCounted("no post yet")
        return await retry_until_async(
            lambda: self.afind(None, self.order, limit), self.wait_s, "post"
        )


def retry_until(fn: Any, wait_s: float, what: str) -> DocBatch:
    """agdb's readers repeat a read that found nothing, at once, until data
    exists. A bound keeps a reader whose data never comes (comments on a post
    nobody comments on any more) from spinning for ever; this deadline only
    limits waiting, it times nothing."""
    give_up = time.monotonic() + wait_s
    while time.monotonic() < give_up:
        got = fn()
        if len(got):
            return got
        time.sleep(0)  # yield, as agdb's task does between tries
    # agdb would spin on; we give up on this read (recorded as skipped)
    raise NotCounted(f"gave up waiting for a {what}")


async def retry_until_async(
    fn: Callable[[], Awaitable[DocBatch]], wait_s: float, what: str
) -> DocBatch:
    """``retry_until`` for an event-loop client: between tries it yields to
    the loop's other clients, as agdb's task does to its runtime."""
    give_up = time.monotonic() + wait_s
    while time.monotonic() < give_up:
        got = await fn()
        if len(got):
            return got
        await asyncio.sleep(0)
    raise NotCounted(f"gave up waiting for a {what}")


class _Writer(ViewsOp):
    """Writer ``w`` of ``n`` (seq i * n + w) into the last of ``colls``;
    ``latest`` finds the latest post (a comment's)."""

    def __init__(self, a: Actor, colls: tuple[Collection, ...], w: int, n: int):
        self.colls, self.insert = colls, colls[-1].insert
        self.p, self.w, self.n = a.p, w, n
        # its user: the commenters' follow the posters'
        self.user = w + (a.p.posters * a.p.scale if a.kind == "write_comments" else 0)
        self.latest = _Latest(colls[0], a.compat, a.p.max_wait_s)


class _PostWriter(_Writer):
    def _post(self, i: int) -> DocBatch:
        seq = i * self.n + self.w if i >= 0 else -1 - i + (1 << 40)  # warm-up ids apart
        return _one(
            seq,
            author=self.user,
            title=f"{self.p.title} {self.user}",
            body=f"{self.p.body} {self.user}",
        )

    def __call__(self, i: int) -> None:
        self.insert(self._post(i))

    def opened(self, posts: AsyncView) -> None:  # type: ignore[override]
        self.ainsert = posts.insert

    async def acall(self, i: int) -> None:
        await self.ainsert(self._post(i))


class _CommentWriter(_Writer):
    def _comment(self, i: int, post: int) -> DocBatch:
        seq = i * self.n + self.w
        return _one(seq, post=post, author=self.user, body=f"{self.p.comment} {self.user}")

    def __call__(self, i: int) -> None:
        self.insert(self._comment(i, int(self.latest().ids[0])))

    def opened(self, posts: AsyncView, comments: AsyncView) -> None:  # type: ignore[override]
        self.latest.opened(posts)
        self.ainsert = comments.insert

    async def acall(self, i: int) -> None:
        post = int((await self.latest.acall()).ids[0])
        await self.ainsert(self._comment(i, post))


class _PostReader(ViewsOp):
    def __init__(self, posts: Collection, p: SocialParams, compat: bool):
        self.colls = (posts,)
        self.latest = _Latest(posts, compat, p.max_wait_s)
        self.k = p.posts_per_read

    def __call__(self, i: int) -> None:
        self.latest(self.k)

    def opened(self, posts: AsyncView) -> None:  # type: ignore[override]
        self.latest.opened(posts)

    async def acall(self, i: int) -> None:
        await self.latest.acall(self.k)


class _CommentReader(ViewsOp):
    def __init__(self, posts: Collection, comments: Collection, p: SocialParams, compat: bool):
        self.colls = (posts, comments)
        self.latest = _Latest(posts, compat, p.max_wait_s)
        self.find = comments.find
        self.k = p.comments_per_read
        self.compat = compat
        self.wait_s = p.max_wait_s

    def __call__(self, i: int) -> None:
        post = int(self.latest().ids[0])
        where = Cmp("post", "eq", post)
        got = self.find(where, (SEQ, True), self.k)
        if not len(got):
            if not self.compat:
                raise NotCounted("no comment yet")
            retry_until(lambda: self.find(where, (SEQ, True), self.k), self.wait_s, "comment")

    def opened(self, posts: AsyncView, comments: AsyncView) -> None:  # type: ignore[override]
        self.latest.opened(posts)
        self.afind = comments.find

    async def acall(self, i: int) -> None:
        post = int((await self.latest.acall()).ids[0])
        where = Cmp("post", "eq", post)
        got = await self.afind(where, (SEQ, True), self.k)
        if not len(got):
            if not self.compat:
                raise NotCounted("no comment yet")
            await retry_until_async(
                lambda: self.afind(where, (SEQ, True), self.k), self.wait_s, "comment"
            )


@dataclass(frozen=True, eq=False)
class Actor:
    """Factory for one kind of actor's ops (picklable): ``kind`` is its
    task's name (``SocialParams.actors``, or ``creating_users``)."""

    kind: str
    spec: tuple[tuple[str, Schema], ...]  # the three collections, opened inside each client
    p: SocialParams
    compat: bool = False

    def __call__(self, coll: Collection, c: int, clients: int) -> Op:
        users, posts, comments = (coll.store.open_collection(*named) for named in self.spec)
        p, compat = self.p, self.compat
        if self.kind == "creating_users":
            batches = [
                DocBatch(
                    np.array([i], np.int64),
                    {
                        "name": np.array([f"user{i}"], object),
                        "email": np.array([f"u{i}@a.b"], object),
                    },
                )
                for i in range(1024)
            ]
            return BatchInserts(users, batches)
        if self.kind == "write_posts":
            return _PostWriter(self, (posts,), c, clients)
        if self.kind == "write_comments":
            return _CommentWriter(self, (posts, comments), c, clients)
        if self.kind == "read_posts":
            return _PostReader(posts, p, compat)
        return _CommentReader(posts, comments, p, compat)


def _compact_all(store: Store, *colls: Collection) -> None:
    """Compact each storage unit once: collections that share one database
    (``Store.size_unit``) would otherwise compact all of it once each."""
    for c in store.one_per_size_unit(*colls):
        c.compact()


class SocialWorkload(Workload):
    name = "social"
    Params = SocialParams
    requires = frozenset({Capability.INSERT, Capability.FIND, Capability.ORDER})

    @classmethod
    def executor(cls, p: SocialParams, store: Store | type[Store], run_executor: str | None) -> str:
        # all the actors' clients together (they run at once, on one
        # executor): many pausing clients run on one event loop where the
        # store's ops can run there, else threads (choose_executor)
        lanes = sum(a[1] for a in p.actors())
        return choose_executor(
            store, run_executor, "auto", lanes, auto_processes=False, thinking=True
        )

    @classmethod
    def check(cls, params: SocialParams) -> None:
        if not (params.posters or params.commenters):
            # readers alone would wait for data no one writes
            raise UserError(
                "at least one poster or commenter is needed (every writer count is 0)",
                where="posters",
            )

    @classmethod
    def memory(cls, p: SocialParams) -> MemoryNeed:
        s = p.scale
        users = (p.posters + p.commenters) * s
        posts = p.posters * s * p.posts
        comments = p.commenters * s * p.comments
        docs = users + posts + comments
        text = (
            users * 40
            + posts * (len(p.title) + len(p.body) + 32)
            + comments * (len(p.comment) + 40)
        )
        clients = (p.posters + p.commenters + p.post_readers + p.comment_readers) * s
        return MemoryNeed(
            {"clients": clients * _CLIENT_BYTES},
            ("scale", "posts", "comments", "post_readers", "comment_readers"),
            docs,
            0,
            text // max(docs, 1),
        )

    @classmethod
    def time_model(cls, p: SocialParams, settings: int, store: type[Store] | None) -> TimeModel:
        """Every actor at once: the run lasts its slowest kind of actor's
        pauses (each actor pauses after every operation; compat's pauses
        are shorter), plus a period for the spread starts; the operations
        themselves (a short transaction each) on top."""
        busy = [(ops, delay / 1000, clients) for _, clients, ops, delay, _ in p.actors() if clients]
        pauses = max(ops * delay for ops, delay, _ in busy) + max(d for _, d, _ in busy)
        ops = sum(clients * ops for ops, _, clients in busy)
        return TimeModel.requests(ops, pauses, tasks=2)  # the users, then everyone

    def run(self, ctx: RunContext, p: SocialParams) -> None:
        compat = ctx.mode == "compat"
        ctx.metrics["method"] = (
            "compat: agdb's delays (delay % (user+1)) and readers retrying until data exists"
            if compat
            else "corrected: fixed delays spread over one period; empty reads not counted"
        )
        users = ctx.collection("users", USERS)
        posts = ctx.collection("posts", post_schema(users.name))
        comments = ctx.collection("comments", comment_schema(users.name, posts.name))
        spec = tuple((c.name, c.schema) for c in (users, posts, comments))

        n_users = (p.posters + p.commenters) * p.scale
        make_users = Actor("creating_users", spec, p)
        ctx.measure(Task("creating_users", make_users, ops=n_users), users, per_iter=1)
        if users.count() != n_users:
            raise TaskFailed(
                f"count check: {ctx.store.engine} holds {users.count()} of {n_users} users"
            )

        actors = p.actors()
        executor = self.executor(p, ctx.store, ctx.driver.executor)
        tasks = []
        for name, clients, iters, delay_ms, k in actors:
            if not clients:
                continue
            if compat:
                timing: dict[str, Any] = {
                    "think_per_client": tuple((delay_ms % (i + 1)) / 1000 for i in range(clients))
                }
            else:
                timing = {"think_s": delay_ms / 1000, "client_offset_s": delay_ms / 1000 / clients}
            tasks.append(
                Task(
                    name,
                    Actor(name, spec, p, compat),
                    clients=clients,
                    ops=clients * iters,
                    items_per_op=k,
                    executor=executor,
                    **timing,
                )
            )
        ctx.measure_mix(
            tasks,
            posts,
            # the study's columns: Per iter, and Total as work
            derive=lambda rec, _: {"busy_s": (rec.latency_ns.get("mean") or 0) * rec.ops / 1e9},
            per_task=[{"per_iter": t.items_per_op} for t in tasks],
        )
        ctx.headline = tasks[0].name  # runs ranked by their first writers' ops/s

        if ctx.store.supports(Capability.SIZE):
            # not a sum over collections: where they share one database, each
            # one's size is all of it (size_bytes_of counts that once)
            size = ctx.store.size_bytes_of
            ctx.metrics["db_size_bytes"] = size(users, posts, comments)
            if ctx.store.supports(Capability.COMPACT):
                ctx.once("compact", lambda: _compact_all(ctx.store, users, posts, comments))
                ctx.metrics["db_size_after_compact_bytes"] = size(users, posts, comments)
        ctx.metrics["posts"] = posts.count()
        ctx.metrics["comments"] = comments.count()
