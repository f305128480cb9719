"""Submit once, follow to the end, and on a retry reattach by the rules in
:mod:`~airflow_provider_pathways.reattach_rules`."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    AirflowTaskTimeout,
    BaseOperator,
)
from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_0_PLUS

from airflow_provider_pathways import metrics
from airflow_provider_pathways.airflow_features import inherited_default_args, store_for_good
from airflow_provider_pathways.failures import (
    DEFAULT_PREEMPTION_RETRIES,
    PathwaysWatchLost,
    apply_preemption_budget,
    never_retried,
)
from airflow_provider_pathways.reattach_rules import (
    JobJudgement,
    KeptJob,
    ReattachAction,
    Verdict,
    reattach_action,
)
from airflow_provider_pathways.task_instance_state import read_task_instance_state
from airflow_provider_pathways.transient import (
    ConnectionToFix,
    OutageTooLong,
    OutageWindow,
    describe_error,
)

T = TypeVar("T")

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context
    from pydantic import JsonValue


#: How long a try killed while submitting looks for the job its submission may still make, and how
#: often (Airflow's supervisor follows its SIGTERM with a SIGKILL 5 s later).
KILLED_SUBMISSION_SEARCH_SECONDS = 3.0
KILLED_SUBMISSION_SEARCH_PAUSE = 0.5


@dataclass(frozen=True)
class Deadline:
    """When a wait must end (epoch seconds, None for never) and which limit set it."""

    at: float | None = None
    reason: str | None = None

    def passed(self) -> bool:
        return self.at is not None and time.time() >= self.at


def task_deadline(task: BaseOperator, context: Context, wait_timeout: float | None) -> Deadline:
    """The earlier of ``wait_timeout`` from now and the end of the task's ``execution_timeout``.

    Airflow does not enforce ``execution_timeout`` while a task is deferred, so the trigger gets it
    as its deadline and the operator cleans up when it fires.
    """
    candidates: list[tuple[float, str]] = []
    if wait_timeout:
        candidates.append((time.time() + wait_timeout, "wait_timeout"))
    start = getattr(context.get("ti"), "start_date", None)
    if task.execution_timeout and isinstance(start, datetime):
        candidates.append((start.timestamp() + task.execution_timeout.total_seconds(), "execution_timeout"))
    if not candidates:
        return Deadline()
    at, reason = min(candidates)
    return Deadline(at, reason)


#: How long past Airflow's ``execution_timeout`` alarm a try that is already giving up on its job
#: has to end it (delete or cancel, per the failure policy) before the alarm cuts it short.
CLEANUP_GRACE_SECONDS = 60.0


def hold_off_execution_timeout_alarm() -> None:
    """Push Airflow's pending ``execution_timeout`` alarm (``SIGALRM``, armed with ``setitimer`` in
    the thread that runs ``execute``) back to :data:`CLEANUP_GRACE_SECONDS` from now, when it is
    due sooner: the try is giving up on its job at its own deadline, which falls a moment before the
    alarm, and the alarm would otherwise interrupt the cleanup half-way (a job left behind that
    the failure policy ends). A cleanup that hangs is still cut, by the postponed alarm."""
    if threading.current_thread() is not threading.main_thread():
        return
    remaining, _interval = signal.getitimer(signal.ITIMER_REAL)
    if 0 < remaining < CLEANUP_GRACE_SECONDS:
        signal.setitimer(signal.ITIMER_REAL, CLEANUP_GRACE_SECONDS)


class ReattachingJobOperator(BaseOperator):
    """
    Base of the operators that submit one job and follow it, with or without the triggerer.

    The submitted job's id is kept in ``task_state_store`` under ``external_id_key`` before it
    is followed (a :class:`~airflow_provider_pathways.reattach_rules.KeptJob`, with the outcome once a
    try reported it). A new try of the same task instance (a retry, or a clear that keeps the
    task's state) judges that job first (:meth:`judge_job`): running or queued, it is followed
    again; succeeded, its result is reported without running it again; ended by preemption or
    another infrastructure failure, it is replaced by a fresh job; ended by a program failure or a
    refused spec, the task fails at once, unless an earlier try already reported that failure:
    then a fresh job is submitted. The one judgement of a job's end (XComs, log tail, deletion,
    the classified exception) is :meth:`finish_job`, used on a first try, after a reattach, when
    polling and when resuming from the triggerer.

    The path of a try, top to bottom (the backends fill in the steps named here)::

        execute -> run_job
          |- a success an earlier try reported -> finish_job (reported again, not run again)
          |- a kept job -> judge_job -> reattach_action (reattach_rules):
          |     FOLLOW -> follow_job          REPORT_SUCCESS, or a failure -> finish_job
          |     RESTART, REPLACE -> discard_job, then submit (below)
          |     SUBMIT -> submit (below); the reported job is left as it is
          |- no kept job, one found by its marks -> adopt_unclaimed_job -> follow_job
          '- submit_job -> keep its id (or end the job: _end_unkept) -> follow_job
        follow_job: poll (look every poll_interval, riding out outages) or defer to a trigger
          -> finish_job: the task's result, or the classified failure (failures.py)
        a time limit -> time_out -> give_up (the failure policy)
        the task killed -> on_kill -> end_killed_job (the kill policy)
    """

    external_id_key: str = "job"
    #: What becomes of a job whose cleanup failed, for the warning.
    left_behind: str = "it may still exist"
    poll_interval: float
    outage_tolerance: float
    #: The ``backend`` tag of the task's metrics (:mod:`airflow_provider_pathways.metrics`).
    metrics_backend: str | None = None

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:  # type: ignore[override]
        """``BaseOperator.partial`` with the preemption budget and retry policy the unmapped task
        gets (:func:`~airflow_provider_pathways.failures.apply_preemption_budget`): ``partial()``
        fills Airflow's own defaults (``retries=0``, no policy) before the operator is built, and
        the scheduler takes a mapped task's tries from them."""
        apply_preemption_budget(
            kwargs,
            kwargs.get("preemption_retries", DEFAULT_PREEMPTION_RETRIES),
            inherited=inherited_default_args(kwargs),
        )
        return super().partial(**kwargs)  # type: ignore[misc]

    #: Set when the try gave up on its job at a time limit: the cleanup then followed the failure
    #: policy (:meth:`give_up`), and the kill Airflow sends after its ``execution_timeout`` alarm
    #: changes nothing.
    _gave_up = False

    def time_out(self, context: Context, reason: str | None) -> NoReturn:
        """The wait reached a time limit (``reason``): :meth:`give_up`, and let no kill follow. A job
        that giving up keeps is left running (:meth:`leave_running`)."""
        hold_off_execution_timeout_alarm()
        self._gave_up = True
        self.leave_running(context)
        self.give_up(context, reason)

    #: The context of the try while its submission is under way (its job's id not known yet).
    _submitting: Context | None = None
    #: Set when the task was killed and its job is to end (:meth:`on_kill`).
    _killed = False

    def on_kill(self) -> None:
        """The task was killed (a user marked or cleared it): end the job per the kill policy
        (:meth:`discards_when_killed`). Airflow also calls this after its ``execution_timeout``
        alarm, once the try has given up on the job per the failure policy: then it does nothing.

        Killed while its submission is under way, the try knows no job yet, and the cluster may make
        it a moment later: it looks for the job by its marks (:meth:`end_killed_submission`), and a
        submission that answers after that is ended by the try itself (:meth:`_submit`)."""
        if self._gave_up or not self.discards_when_killed():
            return
        self._killed = True
        submitting = self._submitting
        if submitting is not None and self.job_in_hand() is None:
            self.end_killed_submission(submitting)
        else:
            self.end_killed_job()

    def stop_if_ended_meanwhile(self, context: Context) -> None:
        """Before the try submits or defers: when its task instance is no longer running (a user
        marked it failed or success, or cleared it, and Airflow has not killed this try yet: its
        next heartbeat would), do what that kill does (:meth:`on_kill`) and stop. A submission then
        makes a job no try follows, and Airflow 3 refuses to defer an ended task instance, so no
        trigger would watch the job. Airflow 3 only; a state that cannot be read lets the try go on."""
        if not AIRFLOW_V_3_0_PLUS:
            return
        try:
            state = read_task_instance_state(context["ti"])
        except Exception:
            return
        if state is None or state == "running":
            return
        self.on_kill()
        raise AirflowException(
            f"The task instance is {state} now: it was marked or cleared while this try ran, so the try "
            "stops here as a kill would stop it"
        )

    def end_killed_submission(self, context: Context) -> None:
        """End the job of a submission the kill cut (:meth:`end_unclaimed_jobs`), looking for up to
        :data:`KILLED_SUBMISSION_SEARCH_SECONDS`: a request already sent is acted on by the
        cluster whether or not its sender lives."""
        deadline = time.monotonic() + KILLED_SUBMISSION_SEARCH_SECONDS
        while True:
            try:
                ended = self.end_unclaimed_jobs(context)
            except Exception as err:
                self.log.warning("Could not look for the job of the cut submission: %s", describe_error(err))
                ended = []
            if ended:
                self.log.info("Killed while submitting; ended %s", ", ".join(ended))
                return
            if time.monotonic() + KILLED_SUBMISSION_SEARCH_PAUSE >= deadline:
                self.log.warning(
                    "Killed while submitting; no job of this task instance appeared within %gs. If the "
                    "cluster makes it later, no try follows it: end it by hand (its marks name this "
                    "task instance)",
                    KILLED_SUBMISSION_SEARCH_SECONDS,
                )
                return
            time.sleep(KILLED_SUBMISSION_SEARCH_PAUSE)

    def end_killed_job(self) -> None:
        """Delete or cancel the job of a killed try (harmless if it is gone)."""

    def metric_tags(self, context: Context | None) -> dict[str, str]:
        """The tags of this task's metrics."""
        ti = context.get("ti") if context is not None else None
        return metrics.task_tags(ti, backend=self.metrics_backend)

    def recall_outcome(self, outcome: JsonValue) -> Any:
        """What :meth:`finish_job` observes for a success a try reported (``outcome``, as kept by
        :meth:`remember_outcome`); None: read the job again."""
        return None

    @abstractmethod
    def submit_job(self, context: Context) -> JsonValue:
        """Submit the job; its id, to be kept for a retry."""

    @abstractmethod
    def judge_job(self, external_id: JsonValue, context: Context) -> JobJudgement | None:
        """Where the job an earlier try submitted stands; None when it is not this task's job."""

    @abstractmethod
    def follow_job(self, external_id: JsonValue, context: Context) -> Any:
        """Wait for the job (polling, or deferring to the triggerer) and return :meth:`finish_job`."""

    @abstractmethod
    def finish_job(self, context: Context, external_id: JsonValue, observed: Any = None) -> Any:
        """Judge the job's end: the task's result on success; raise the classified failure."""

    @abstractmethod
    def discard_job(self, external_id: JsonValue, reason: str, *, wait: bool = False) -> None:
        """Delete or cancel the job (replaced, given up or killed); harmless if it is gone.
        ``wait``: return once it is gone, so that a fresh job can take its place."""

    @abstractmethod
    def describe_job(self, external_id: JsonValue) -> str:
        """The job as a user names it, e.g. ``PathwaysJob ml/train-1a2b`` or ``Slurm job 42``."""

    @abstractmethod
    def give_up(self, context: Context, reason: str | None) -> NoReturn:
        """The wait ran out of time (``reason``: the limit): clean up per policy and fail the try."""

    @abstractmethod
    def discards_when_giving_up(self) -> bool:
        """Whether a job the task gives up on is deleted or cancelled (``delete_on``/``cancel_on_kill``)."""

    @abstractmethod
    def discards_when_killed(self) -> bool:
        """Whether the task's kill deletes or cancels its job (``kill`` in ``delete_on``,
        ``cancel_on_kill``)."""

    def discards_failed_jobs(self) -> bool:
        """Whether the task deletes a job that failed (``failure`` in ``delete_on``): a new try then
        deletes one whose reported failure an earlier try could not clean up before it submits a
        fresh job."""
        return False

    def check_trigger_event(self, context: Context, event: dict[str, Any]) -> None:
        """The answers every trigger may give: a timeout gives up (:meth:`give_up`), an error loses
        sight of the job (:meth:`lose_sight`)."""
        if event.get("status") == "timeout":
            self.time_out(context, event.get("reason"))
        if event.get("status") == "error":
            self.lose_sight(context, event.get("message") or f"unexpected trigger event {event!r}")

    def pre_execute(self, context: Context) -> Any:
        """Before the try runs: on Airflow 2, a try that resumes from its deferral at its
        ``execution_timeout`` gives up on its job here, as the trigger's timeout event does
        (:meth:`give_up` through the operator's ``execute_complete``: delete or cancel per the failure
        policy, ``AirflowTaskTimeout``). Airflow 2 would fail it before its resume method runs, and
        then call :meth:`on_kill` on an operator that knows no job, whether the trigger's timeout
        event or the scheduler's trigger timeout (``__fail__``) resumed it
        (:func:`~airflow_provider_pathways.airflow_features.resumed_at_execution_timeout`)."""
        from airflow_provider_pathways.airflow_features import resumed_at_execution_timeout

        result = super().pre_execute(context)
        resumption = resumed_at_execution_timeout(context, self.execution_timeout)
        if resumption is not None:
            self.log.warning(
                "The task's execution_timeout (%s) passed while it was deferred; giving up on its job "
                "as the trigger's timeout does",
                self.execution_timeout,
            )
            self.execute_complete(context, **resumption)  # type: ignore[attr-defined]
        return result

    def log_tail(self, title: str, tail: str) -> None:
        """Copy the end of the job's output into the task log under ``title``, one ``  |`` line each."""
        if tail.strip():
            self.log.info("%s", title)
            for line in tail.rstrip().splitlines():
                self.log.info("  | %s", line)

    def clean_up(self, action: str, remove: Callable[[], object]) -> bool:
        """Delete or cancel the job once the try's outcome is known (``remove``), riding out an
        outage of up to ``outage_tolerance`` seconds (a job left behind bills its TPUs); a failure is
        logged (``Could not <action>``, and :attr:`left_behind`) and never changes that outcome.
        True when it worked."""
        outage = OutageWindow(self.outage_tolerance, what="the cluster")
        while True:
            try:
                remove()
            except Exception as err:
                if self.is_transient_error(err):
                    try:
                        delay = outage.failed(err, describe_error(err))
                    except OutageTooLong:
                        pass
                    else:
                        if outage.failures == 1:
                            self.log.warning(
                                "Could not %s yet: %s; retrying for up to %gs",
                                action,
                                describe_error(err),
                                self.outage_tolerance,
                            )
                        time.sleep(delay)
                        continue
                self.log.warning("Could not %s: %s; %s", action, describe_error(err), self.left_behind)
                return False
            return True

    def fail_for_good(self, context: Context, error: ConnectionToFix) -> NoReturn:
        """The wait met an error no retry gets past (:class:`ConnectionToFix`: e.g. a Google
        identity whose credentials get no new access token mid-wait, in the worker or, per its
        error event, in the triggerer): fail the try with ``error``, never retried. First end the
        kept job as the last try's give-up policy says (:meth:`discards_when_giving_up`), since no
        try will follow it; the message says what became of it: deleted or cancelled, left running
        as the policy says, or not ended either (the same refusal): then it must be ended by hand."""
        store = context.get("task_state_store")
        stored = store.get(self.external_id_key) if store is not None else None
        external_id = KeptJob.from_stored(stored).job if stored is not None else self.job_in_hand()
        if external_id is None:
            note = ""
        elif not self.discards_when_giving_up():
            note = (
                f"; {self.describe_job(external_id)} is left running, as the task's cleanup policy "
                "says (no try will follow it: end it by hand, or clear the task once the connection "
                "works)"
            )
        else:
            try:
                discarded = self.discard_given_up(external_id, context)
            except Exception as err:
                why = "for the same reason" if isinstance(err, type(error)) else f"({describe_error(err)})"
                note = (
                    f"; {self.describe_job(external_id)} could not be deleted or cancelled either {why} "
                    "and may still be running: end it by hand"
                )
            else:
                note = (
                    f"; no try will follow {self.describe_job(external_id)}, so it was deleted or cancelled"
                    if discarded
                    else f"; {self.describe_job(external_id)} is left to the newer try that follows it"
                )
        raise never_retried(type(error), f"{error}{note}") from error

    def job_in_hand(self) -> JsonValue | None:
        """The id of the job this try follows, as it knows it without ``task_state_store`` (which
        Airflow before 3.3 lacks): the one it submitted or reattached to, or that its trigger's
        event names."""
        return getattr(self, "_following", None)

    def lose_sight(self, context: Context, message: str, error: BaseException | None = None) -> NoReturn:
        """The task can no longer follow its job, which may still be running: raise
        :class:`~airflow_provider_pathways.failures.PathwaysWatchLost`. When a retry will follow, the
        job is kept and the retry reattaches to it; on the last try it is deleted or cancelled (per
        :meth:`discards_when_giving_up`), so that it does not run unwatched."""
        store = context.get("task_state_store")
        stored = store.get(self.external_id_key) if store is not None else None
        external_id = KeptJob.from_stored(stored).job if stored is not None else None
        if external_id is None:
            note = ""
        elif self._will_retry(context, PathwaysWatchLost(message)):
            self.leave_running(context)
            note = f"; {self.describe_job(external_id)} is kept, and the next try reattaches to it"
        elif not self.discards_when_giving_up():
            self.leave_running(context)
            note = f"; {self.describe_job(external_id)} is left running, as the task's cleanup policy says"
        else:
            try:
                discarded = self.discard_given_up(external_id, context)
            except Exception as err:
                note = (
                    f"; {self.describe_job(external_id)} could not be deleted or cancelled either "
                    f"({describe_error(err)}) and may still be running: end it by hand"
                )
            else:
                note = (
                    f"; this was the last try, so {self.describe_job(external_id)} was deleted or cancelled"
                    if discarded
                    else f"; {self.describe_job(external_id)} is left to the newer try that follows it"
                )
        raise PathwaysWatchLost(f"{message}{note}") from error

    def discard_given_up(self, external_id: JsonValue, context: Context) -> bool:
        """Delete or cancel a job the last try gave up on, and drop the kept job; False when it is
        left (and kept) for a newer try that follows it."""
        self.discard_job(external_id, "the task gave up on it")
        self.forget_job(context)
        return True

    def _will_retry(self, context: Context, error: BaseException) -> bool:
        """Whether Airflow will retry this try when it fails with ``error``: tries are left
        (Airflow never retries beyond ``retries``) and the retry policy does not fail it."""
        ti = context.get("ti")
        try_number, max_tries = getattr(ti, "try_number", None), _max_tries(context)
        if not isinstance(try_number, int) or not isinstance(max_tries, int) or try_number > max_tries:
            return False
        if isinstance(error, AirflowFailException):
            return False
        policy = getattr(self, "retry_policy", None)
        if policy is None:
            return True
        from airflow.sdk.definitions.retry_policy import RetryAction

        return policy.evaluate(error, try_number, max_tries, context).action is not RetryAction.FAIL

    def poll(
        self,
        context: Context,
        deadline: Deadline,
        look: Callable[[], T | None],
        *,
        service: str,
        is_transient: Callable[[BaseException], bool],
    ) -> T:
        """Call ``look`` every ``poll_interval`` seconds until it returns something, riding out an
        outage of ``service`` of up to ``outage_tolerance`` seconds; :meth:`give_up` at ``deadline``."""
        outage = OutageWindow(self.outage_tolerance, what=service)
        while True:
            delay = self.poll_interval
            try:
                observed = look()
            except Exception as err:
                if isinstance(err, AirflowException):
                    raise
                if not is_transient(err):
                    if isinstance(err, ConnectionToFix):  # e.g. the credentials refused
                        self.fail_for_good(context, err)
                    self.lose_sight(
                        context, f"reading the job from {service} failed: {describe_error(err)}", err
                    )
                try:
                    delay = outage.failed(err, describe_error(err))
                except OutageTooLong as too_long:
                    self.lose_sight(context, str(too_long), err)
                if outage.failures == 1:
                    self.log.warning(
                        "%s is unreachable (%s); retrying for up to %gs",
                        service,
                        describe_error(err),
                        outage.tolerance,
                    )
            else:
                lasted = outage.recovered()
                if lasted is not None:
                    self.log.info("%s answers again after %.0fs", service, lasted)
                if observed is not None:
                    return observed
            if deadline.passed():
                self.time_out(context, deadline.reason)
            if deadline.at is not None:  # look again at the deadline, before Airflow's own alarm
                delay = max(0.0, min(delay, deadline.at - time.time()))
            time.sleep(delay)

    def run_job(self, context: Context) -> Any:
        """Reattach to the job an earlier try submitted, or submit one; then follow it. Airflow's
        ``execution_timeout`` alarm while the try follows its job gives up on the job as the
        try's own deadline does (the failure policy), not as a kill."""
        self._gave_up = self._killed = False
        self._following: JsonValue | None = None
        try:
            return self._run_job(context)
        except AirflowTaskTimeout:
            if self._gave_up:
                raise
            if self._following is None:  # struck while submitting: a job may have been made
                self._gave_up = True
                if self.discards_when_giving_up():
                    self.clean_up("end the job of a submission the timeout cut", lambda: self.log.info(
                        "Ended after the timeout cut its submission: %s",
                        ", ".join(self.end_unclaimed_jobs(context)) or "nothing was made",
                    ))  # fmt: skip
                raise
            self.time_out(context, "execution_timeout")

    def _follow(self, external_id: JsonValue, context: Context) -> Any:
        self._following = external_id
        return self.follow_job(external_id, context)

    def _run_job(self, context: Context) -> Any:
        store = context.get("task_state_store")
        stored = store.get(self.external_id_key) if store is not None else None
        if stored is not None:
            kept = KeptJob.from_stored(stored)
            if kept.reported is Verdict.SUCCEEDED:
                self.log.info(
                    "%s succeeded and an earlier try reported it; reporting it again, not running it "
                    "again (delete the task's state key %r to run it again)",
                    self.describe_job(kept.job),
                    self.external_id_key,
                )
                return self.finish_job(context, kept.job, self.recall_outcome(kept.outcome))
            try:
                judgement = self.judge_job(kept.job, context)
            except AirflowException:
                raise
            except Exception as err:
                self.lose_sight(
                    context,
                    f"could not read {self.describe_job(kept.job)}, submitted by an earlier try: "
                    f"{describe_error(err)}",
                    err,
                )
            if judgement is not None:
                result = self._reattach(kept, judgement, context)
                if result is not _SUBMIT:
                    return result
        if stored is None:
            adopted = self.adopt_unclaimed_job(context)
            if adopted is not None:
                self.log.warning(
                    "Following %s, which an earlier try of this task instance submitted without "
                    "learning its id (the answer was lost, or the try died first); not submitting again",
                    self.describe_job(adopted),
                )
                self._keep(context, KeptJob(adopted))
                metrics.emit(metrics.TRIES_REPLACED, 1, self.metric_tags(context))
                return self._follow(adopted, context)
        external_id = self._submit(context)
        if external_id is not None:
            try:
                self._keep(context, KeptJob(external_id))
            except Exception as err:
                self._end_unkept(external_id, err)
                raise
        return self._follow(external_id, context)

    def _end_unkept(self, external_id: JsonValue, error: BaseException) -> None:
        """The try could not keep the id of the job it just submitted (its task instance was
        cleared or removed in the meantime: the API server answers 404; or the store failed): no try
        could follow the job by its id, so it is ended now, before the try fails."""
        job = self.describe_job(external_id)
        self.log.warning(
            "Could not keep the id of %s (%s): no try could follow it, so it is ended",
            job,
            describe_error(error),
        )
        self.clean_up(f"end {job}", lambda: self.discard_job(external_id, "its id could not be kept"))

    def _submit(self, context: Context) -> JsonValue:
        """:meth:`submit_job`. When its answer is lost on the way (the cluster may have made the
        job: :meth:`is_transient_error`), the try loses sight of a job it cannot name:
        :class:`~airflow_provider_pathways.failures.PathwaysWatchLost`, retried like an
        infrastructure failure, and the retry finds the job by its marks and follows it; the last
        try ends what it finds (:meth:`end_unclaimed_jobs`), so that nothing runs unwatched."""
        self.stop_if_ended_meanwhile(context)
        self._submitting = context
        try:
            external_id = self.submit_job(context)
        except AirflowException:
            raise
        except Exception as err:
            if not self.is_transient_error(err):
                raise
            message = (
                f"the answer to the submission was lost ({describe_error(err)}), so the job may have "
                "been made"
            )
            if self._will_retry(context, PathwaysWatchLost(message)):
                note = "; the next try finds it, if it was made, and follows it"
            else:
                try:
                    ended = self.end_unclaimed_jobs(context)
                except Exception as cleanup_error:
                    note = (
                        f"; finding it to end it failed too ({describe_error(cleanup_error)}): it may "
                        "be running, end it by hand"
                    )
                else:
                    found = ", ".join(ended) if ended else "no job of this task instance was found"
                    note = f"; this was the last try, so what it made was ended: {found}"
            raise PathwaysWatchLost(f"{message}{note}") from err
        finally:
            self._submitting = None
        if self._killed:  # the answer came after the kill (Airflow 3's kill lets the try go on)
            job = self.describe_job(external_id)
            self.clean_up(f"end {job}", lambda: self.discard_job(external_id, "task killed while submitting"))
            raise AirflowException(f"The task was killed while submitting {job}; it was ended")
        return external_id

    def is_transient_error(self, error: BaseException) -> bool:
        """Whether ``error`` from the cluster's API may pass by itself (a lost connection, a timeout,
        a server error, throttling): not a refusal. A submission that met it may have gone out; a
        cleanup that met it is tried again (:meth:`clean_up`)."""
        return False

    def end_unclaimed_jobs(self, context: Context) -> list[str]:
        """Delete or cancel the active jobs of this task instance that no try kept (found by their
        marks); what was ended, as users name it."""
        return []

    def _keep(self, context: Context, kept: KeptJob) -> None:
        """Keep the job this try follows, with the task instance's ``max_tries`` of now."""
        store = context.get("task_state_store")
        if store is not None:
            store_for_good(
                store, self.external_id_key, replace(kept, max_tries=_max_tries(context)).to_stored()
            )

    def adopt_unclaimed_job(self, context: Context) -> JsonValue | None:
        """A job an earlier try of this task instance submitted and kept no id of, still active; None
        when there is none (or the backend finds jobs another way, as GKE does by name and labels)."""
        return None

    def _reattach(self, kept: KeptJob, judgement: JobJudgement, context: Context) -> Any:
        stored = kept.job
        cleared = kept.cleared_since(_max_tries(context))
        action = reattach_action(
            judgement,
            kept.reported,
            cleared=cleared,
            kill_ends_job=self.discards_when_killed(),
            left_running=kept.left_running,
        )
        job = self.describe_job(stored)
        detail = f": {judgement.message}" if judgement.message else ""
        if action is ReattachAction.FOLLOW:
            self.log.info("Reattaching to %s, submitted by an earlier try%s", job, detail)
            if kept.reported is not None or cleared or kept.left_running:  # followed again: unmarked
                self._keep(context, KeptJob(stored))
            metrics.emit(metrics.TRIES_REPLACED, 1, self.metric_tags(context))
            return self._follow(stored, context)
        if action is ReattachAction.RESTART:
            self.log.warning(
                "%s still runs, but the task was cleared since an earlier try followed it; ending it "
                "as the kill does, and submitting a fresh job%s",
                job,
                detail,
            )
            self.discard_job(stored, "the task was cleared", wait=True)
            self.forget_job(context)
            return _SUBMIT
        if action is ReattachAction.REPORT_SUCCESS:
            self.log.info("%s succeeded after an earlier try ended; reporting it, not running it again", job)
            return self.finish_job(context, stored)
        failure = judgement.failure.value if judgement.failure else "unknown"
        if action is ReattachAction.SUBMIT:
            if judgement.failure is None:  # it ended before a wait_until="ready" try saw it ready
                self.log.warning(
                    "%s ended and an earlier try reported the task's failure; submitting a fresh job, "
                    "the ended one is left as it is",
                    job,
                )
                return _SUBMIT
            if self.discards_failed_jobs():  # the try that reported it could not delete it
                self.log.warning(
                    "%s failed (%s) and an earlier try reported it; deleting it and submitting a fresh job",
                    job,
                    failure,
                )
                reason = f"replaced after {failure}"
                self.clean_up(f"delete {job} ({reason})", lambda: self.discard_job(stored, reason, wait=True))
                return _SUBMIT
            self.log.warning(
                "%s failed (%s) and an earlier try reported it; submitting a fresh job, the failed "
                "one is left as it is",
                job,
                failure,
            )
            return _SUBMIT
        if action is ReattachAction.REPLACE:
            if judgement.suspended:
                self.log.warning(
                    "%s is still suspended, and an earlier try failed on that suspension; deleting or "
                    "cancelling it and submitting a fresh job",
                    job,
                )
                failure = "suspension"
            else:
                self.log.warning(
                    "%s ended (%s) after an earlier try ended%s; submitting a fresh job", job, failure, detail
                )
            self.discard_job(stored, f"replaced after {failure}", wait=True)
            self.forget_job(context)
            return _SUBMIT
        self.log.error(
            "%s failed (%s) after an earlier try ended%s; not running it again", job, failure, detail
        )
        return self.finish_job(context, stored)

    def remember_outcome(
        self,
        context: Context | None,
        verdict: Verdict,
        outcome: JsonValue = None,
        *,
        left_running: bool = False,
    ) -> None:
        """Keep the outcome this try reports with the kept job: a new try never stops at a failure
        already reported, and reports a success again (``outcome``) even once the job is gone.
        ``left_running``: the try fails while its job lives on (suspended, it runs again once
        resumed), so a new try judges the job's own end (:meth:`leave_running`)."""
        self._update_kept(
            context, lambda kept: replace(kept.reporting(verdict, outcome), left_running=left_running)
        )

    def leave_running(self, context: Context | None) -> None:
        """Mark the kept job as left running by a try that ended (its wait is over, or it lost
        sight of the job or gave up on it and kept it): a clear of the task then kills no try that
        follows it, and the cleared try follows the job instead of ending it
        (:attr:`~airflow_provider_pathways.reattach_rules.KeptJob.left_running`)."""
        self._update_kept(context, lambda kept: replace(kept, left_running=True))

    def _update_kept(self, context: Context | None, change: Callable[[KeptJob], KeptJob]) -> None:
        """Rewrite the kept job, if there is one; best effort: without it the job is judged as it
        was kept."""
        store = context.get("task_state_store") if context is not None else None
        if store is None:
            return
        with contextlib.suppress(Exception):
            stored = store.get(self.external_id_key)
            if stored is not None:
                store_for_good(store, self.external_id_key, change(KeptJob.from_stored(stored)).to_stored())

    def forget_job(self, context: Context | None) -> None:
        """Drop the kept job id: the next try submits a fresh job."""
        store = context.get("task_state_store") if context is not None else None
        if store is not None:
            with contextlib.suppress(Exception):  # best effort; a stale id is judged again
                store.delete(self.external_id_key)


def _max_tries(context: Context) -> int | None:
    max_tries = getattr(context.get("ti"), "max_tries", None)
    return max_tries if isinstance(max_tries, int) else None


_SUBMIT = object()
