"""The lower bound a policy is measured against: Capstan's packing with every node ready the moment it is asked
for and no headroom."""

from __future__ import annotations

from capstan.capacity.controller import Controller
from capstan.capacity.planner import PlannerConfig


class OraclePolicy(Controller):
    zero_delay = True
    """The simulator makes this policy's nodes ready at once."""

    def __init__(self) -> None:
        # its nodes are up at once and it holds no headroom: it repacks every 300 s, which on openb default
        # cost less than 600 or 900 s (101,069 against 101,282 and 101,307)
        super().__init__(PlannerConfig(headroom=False), react=0.0, name="oracle", repack_interval=300.0)
