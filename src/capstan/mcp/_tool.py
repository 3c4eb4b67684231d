"""The shape of one MCP tool: :class:`ToolSpec` (name, description, strict argument model, budget, the kinds it
reads, a pure ``run`` over a :class:`Call`), the argument bases every tool shares, and the errors a tool raises.

A tool's ``run`` reads only its :class:`Call`: the redacted :class:`~capstan.mcp._state.State`, a
:class:`~capstan.mcp._state.LogReader`, the budget the caller picked and the clock. It returns a plain JSON dict;
the server stamps the token count, cuts what is over budget and passes it through the redactor once more
(:mod:`capstan.mcp._server`). Arguments are pydantic models that forbid unknown names and coerce nothing (a string
where a number belongs is an error naming the argument); choices are ``Literal`` types so their schema lists them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from capstan.mcp._shape import Budget, Page, paginate

if TYPE_CHECKING:
    from capstan.mcp._state import LogReader, State

T = TypeVar("T")

MAX_TEXT = 253
"""The longest name, namespace or selector argument accepted (a DNS subdomain's length)."""
MAX_QUERY = 1000


class ToolArgs(BaseModel):
    """Arguments every tool takes: ``budget``, the most tokens the answer may hold (default and maximum per
    tool)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    budget: int | None = Field(
        None,
        ge=50,
        le=100_000,
        description="The most tokens the answer may take (each tool has a default and a cap).",
    )


class ListArgs(ToolArgs):
    """Arguments of a tool that lists: ``cursor`` continues a listing from its previous answer's
    ``next_cursor``."""

    cursor: str | None = Field(
        None, max_length=96, description="The next_cursor of the previous answer, to read the next page."
    )


class Unavailable(Exception):
    """What a tool needs is not there (no history store, an object that does not exist): the answer is one line
    saying so, marked as an error result, and the server goes on."""


class BadArgument(ValueError):
    """An argument the schema accepts but the tool cannot use (a malformed time): a JSON-RPC ``Invalid params``
    error naming ``argument``."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument
        self.message = message


@dataclass(frozen=True)
class Call:
    """One tool call's inputs besides its arguments."""

    tool: str
    state: State
    logs: LogReader
    budget: int
    now: float

    def page(
        self,
        items: Iterable[T],
        args: ListArgs,
        *,
        render: Callable[[T], Any] = lambda item: item,
        limit: int | None = None,
        reserve: int = 200,
    ) -> Page:
        """The page of ``items`` the caller's cursor points at, fitting the budget less ``reserve`` tokens kept
        for the rest of the answer."""
        query = args.model_dump(exclude={"cursor", "budget"})
        return paginate(
            items,
            tool=self.tool,
            query=query,
            cursor=args.cursor,
            budget=max(50, self.budget - reserve),
            render=render,
            limit=limit,
        )

    def history(self) -> Any:
        """The history store's reader; :class:`Unavailable` when the server runs without one."""
        if self.state.history is None:
            raise Unavailable(
                f"{self.tool}: no history store is configured (start `capstan mcp serve` with --store); "
                "the live tools still work"
            )
        return self.state.history


Run = Callable[[Call, Any], Awaitable[Mapping[str, Any]]]


@dataclass(frozen=True)
class ToolSpec:
    """One read-only tool. ``reads`` names the kinds it relies on: when one could not be read the answer says so
    (``cannot_read``) instead of reporting nothing as healthy."""

    name: str
    title: str
    description: str
    args: type[ToolArgs]
    run: Run
    budget: Budget
    reads: tuple[str, ...] = field(default=())
    history: bool = False
