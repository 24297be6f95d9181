"""The driver: runs operation streams over N clients and times them."""

from storebench.driver.choice import executor_names
from storebench.driver.core import ClientResult, FnOp, Interrupted, Op, Task
from storebench.driver.dispatch import Driver
from storebench.driver.executors import Executor

__all__ = [
    "ClientResult",
    "Driver",
    "Executor",
    "FnOp",
    "Interrupted",
    "Op",
    "Task",
    "executor_names",
]
