"""The task runner a config names: mapped partitions run where the user said they would."""

from __future__ import annotations

from prefect.task_runners import ThreadPoolTaskRunner
from prefect_dask import DaskTaskRunner

from pairsieve.config import RunnerConfig
from pairsieve.orchestration.flows import task_runner_for


def test_threads_take_the_configured_number_of_workers():
    runner = task_runner_for(RunnerConfig(task_runner="threads", workers=3))
    assert isinstance(runner, ThreadPoolTaskRunner)
    assert runner._max_workers == 3


def test_dask_without_an_address_starts_one_worker_process_per_configured_worker():
    runner = task_runner_for(RunnerConfig(task_runner="dask", workers=3))
    assert isinstance(runner, DaskTaskRunner)
    assert runner.address is None
    assert runner.cluster_kwargs == {"n_workers": 3, "threads_per_worker": 1, "processes": True}


def test_dask_with_an_address_joins_that_scheduler():
    runner = task_runner_for(RunnerConfig(task_runner="dask", address="tcp://10.0.0.5:8786"))
    assert isinstance(runner, DaskTaskRunner)
    assert runner.address == "tcp://10.0.0.5:8786"
