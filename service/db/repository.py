"""The data-access API: every keyword-only function the service uses, in one namespace.

Contract for all of them: the first argument is a `Session` with no transaction in progress; a
call is one unit of work (one ``with session.begin():`` block: all of it commits or none);
results are domain objects from `service.domain`, never ORM rows; `service.domain.NotFound` means
absent or not visible to ``owner_id``; `service.domain.Conflict` means not allowed in the current
state. Functions may be called from several threads, each with its own session.
"""

from service.db.repo_auth import (
    create_token,
    ensure_token,
    hash_secret,
    list_tokens,
    revoke_token,
    verify_token,
)
from service.db.repo_profile_jobs import (
    claim_profile_job,
    finish_profile_job,
    get_profile_job,
    queue_profile_job,
    release_profile_job,
)
from service.db.repo_profiles import get_profile, list_profiles, profiles_in_use, store_profile
from service.db.repo_quotas import check_can_create_search, queue_room, user_usage
from service.db.repo_runtimes import (
    add_simulator_version,
    count_runtimes,
    finish_retrain,
    get_simulator_version,
    ingest_runtime,
    latest_simulator_version,
    list_retrain_requests,
    list_runtimes,
    list_simulator_versions,
    request_retrain,
    start_retrain,
)
from service.db.repo_searches import (
    add_round,
    cancel_search,
    create_search,
    decide_candidate,
    get_candidate,
    get_search,
    list_candidates,
    list_rounds,
    list_searches,
    set_plan_options,
    set_round_state,
    transition_search,
)
from service.db.repo_specs import (
    get_spec,
    list_spec_summaries,
    list_specs,
    resolve_spec,
    store_spec,
    upload_named,
    zoo_spec,
)
from service.db.repo_status import search_status
from service.db.repo_trials import (
    claim_trial,
    enqueue_trial,
    get_trial,
    heartbeat,
    list_trials,
    release_trial,
    report_trial,
    requeue_stale_trials,
)
from service.db.repo_workers import list_workers, touch_worker, waiting_on_workers

__all__ = [
    "add_round",
    "add_simulator_version",
    "cancel_search",
    "check_can_create_search",
    "claim_profile_job",
    "claim_trial",
    "count_runtimes",
    "create_search",
    "create_token",
    "decide_candidate",
    "enqueue_trial",
    "ensure_token",
    "finish_profile_job",
    "finish_retrain",
    "get_candidate",
    "get_profile",
    "get_profile_job",
    "get_search",
    "get_simulator_version",
    "get_spec",
    "get_trial",
    "hash_secret",
    "heartbeat",
    "ingest_runtime",
    "latest_simulator_version",
    "list_candidates",
    "list_profiles",
    "list_retrain_requests",
    "list_rounds",
    "list_runtimes",
    "list_searches",
    "list_simulator_versions",
    "list_spec_summaries",
    "list_specs",
    "list_tokens",
    "list_trials",
    "list_workers",
    "profiles_in_use",
    "queue_profile_job",
    "queue_room",
    "release_profile_job",
    "release_trial",
    "report_trial",
    "request_retrain",
    "requeue_stale_trials",
    "resolve_spec",
    "revoke_token",
    "search_status",
    "set_plan_options",
    "set_round_state",
    "start_retrain",
    "store_profile",
    "store_spec",
    "touch_worker",
    "transition_search",
    "upload_named",
    "user_usage",
    "verify_token",
    "waiting_on_workers",
    "zoo_spec",
]
