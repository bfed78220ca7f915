"""Hybrid searches in the 3D space (issue 42): TP x PP x DP plans with ZeRO and recompute through the API.

422s naming each bad option; an end-to-end search of GPT-Medium on the zoo's A100-40GB x 8 node
(the service's loop ranks the plans in a job process and records them as predicted candidates with
no trial, so the search completes with no worker running), on SQLite and PostgreSQL; the result
claims no measured best; the dashboard's search, round and candidate pages show each plan's layout
and its predicted memory per GPU with parts and fit verdict; a worker handed a 3D trial refuses it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from runtime.worker.plans import TrialContext, runner
from search.hybrid.threed import rank_plans
from service.cli import app, search_cli_commands
from service.client import ApiError
from service.db import repository as repo
from service.loop import SearchLoop
from service.plans.hybrid_threed import gpt_config
from simulator import zoo
from simulator.spec.measurement import Measurement
from simulator.threed import GPTConfig
from simulator.threed.document import ThreeDDocument

from .helpers import api_client, route_cli

API = "/api/v1"
WAIT = 120.0
DATASETS = Path(__file__).resolve().parents[2] / "datasets"
MODEL, CLUSTER = "GPT-Medium", "A100-40GBx8"


@pytest.fixture
def gpt_zoo(zoo_dir: Path) -> Path:
    """The private zoo plus the repository's GPT-Medium and its A100 nodes (40 GB and 80 GB)."""
    shutil.copy(DATASETS / "models" / f"{MODEL}.json", zoo_dir / "models")
    for name in (CLUSTER, "A100x8"):
        shutil.copy(DATASETS / "clusters" / f"{name}.json", zoo_dir / "clusters")
    zoo.model.cache_clear()
    zoo.cluster.cache_clear()
    return zoo_dir


def create(client: TestClient, headers: dict[str, str], options: Any, **body: Any) -> Any:
    payload = {"model": MODEL, "cluster": CLUSTER, "plan_kind": "hybrid", "plan_options": options,
               "trial_budget": 4, "candidates_per_round": 2, **body}  # fmt: skip
    return client.post(f"{API}/searches", json=payload, headers=headers)


def test_the_traced_gpt_medium_is_read_as_its_megatron_shape(gpt_zoo: Path) -> None:
    cfg = gpt_config(zoo.model(MODEL))
    assert cfg == GPTConfig(hidden=1024, heads=16, layers=24, seq=1024, vocab=50257)
    assert gpt_config(zoo.model(MODEL), heads=8).heads == 8


@pytest.mark.parametrize(
    ("options", "loc", "words"),
    [
        ({"space": "2d"}, ["space"], "'3d'"),
        ({"space": "3d", "gpus": 9}, ["gpus"], "[1, 8]"),
        ({"space": "3d", "gpus": "all"}, ["gpus"], "int in"),
        ({"space": "3d", "global_batch": 0}, ["global_batch"], "int in"),
        ({"space": "3d", "global_batch": 3, "micro_batches": [2]}, ["global_batch"], "no TP x PP x DP plan"),
        ({"space": "3d", "zero_stages": [4]}, ["zero_stages"], "0, 1, 2, 3"),
        ({"space": "3d", "zero_stages": []}, ["zero_stages"], "non-empty"),
        ({"space": "3d", "zero_stages": [True]}, ["zero_stages"], "0, 1, 2, 3"),
        ({"space": "3d", "recompute": ["partial"]}, ["recompute"], "'selective'"),
        ({"space": "3d", "micro_batches": [0]}, ["micro_batches"], "ints in"),
        ({"space": "3d", "micro_batches": "four"}, ["micro_batches"], "ints in"),
        ({"space": "3d", "fused_attention": "yes"}, ["fused_attention"], "False, True"),
        ({"space": "3d", "heads": 7}, ["heads"], "must divide hidden=1024"),
        ({"space": "3d", "heads": -1}, ["heads"], "positive"),
        ({"space": "3d", "tensor": 2}, ["tensor"], "unknown option"),
    ],
)
def test_bad_3d_options_answer_422_naming_the_field(
    client: TestClient, tokens: dict[str, dict[str, str]], gpt_zoo: Path,
    options: dict[str, Any], loc: list[str], words: str,
) -> None:  # fmt: skip
    r = create(client, tokens["alice"], options)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert len(detail) == 1, detail
    assert detail[0]["loc"] == ["body", "plan_options", *loc]
    assert words in detail[0]["msg"]


def test_a_model_that_is_not_a_gpt_is_422_naming_the_model(
    client: TestClient, tokens: dict[str, dict[str, str]], gpt_zoo: Path
) -> None:
    r = create(client, tokens["alice"], {"space": "3d"}, model="tiny-mlp", cluster="A100x8")
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "model"] and "needs a GPT" in detail["msg"]


def test_the_stored_options_are_normalised(
    client: TestClient, tokens: dict[str, dict[str, str]], gpt_zoo: Path
) -> None:
    r = create(client, tokens["alice"], {"space": "3d", "recompute": "full", "micro_batches": [4, 2, 4]})
    assert r.status_code == 201, r.text
    assert r.json()["plan_options"] == {
        "space": "3d", "global_batch": 64, "gpus": 8, "zero_stages": [0, 1, 2, 3], "recompute": ["full"],
        "micro_batches": [2, 4], "fused_attention": [False], "heads": 16,
    }  # fmt: skip


def secret(headers: dict[str, str]) -> str:
    return headers["Authorization"].removeprefix("Bearer ")


def test_a_3d_search_completes_with_no_worker_and_the_dashboard_shows_layout_and_memory(
    client: TestClient, tokens: dict[str, dict[str, str]], sessions: sessionmaker[Session], gpt_zoo: Path
) -> None:
    """GPT-Medium, global batch 256 on 8 x A100-40GB: micro-batches of 16 on plain data parallelism
    need ~43 GB per GPU, so the memory model drops them (they lead on the 80 GB node); every
    recorded plan fits; the one round holds the trial_budget fastest predicted, no trial is queued."""
    options = {"space": "3d", "global_batch": 256, "micro_batches": [4, 8, 16], "recompute": ["none", "full"]}
    r = create(client, tokens["alice"], options)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    loop = SearchLoop(sessions)
    steps = []
    for _ in range(4):  # no worker claims anything: the search must complete on its own
        steps.append(loop.advance(sid, wait_s=WAIT))
        if steps[-1] == "completed":
            break
    assert steps == ["completed"], steps  # one step: the round is ranked and recorded, no trial queued

    with sessions() as s:
        model = repo.zoo_spec(s, kind="model", name=MODEL).model_spec()
        cands = repo.list_candidates(s, search_id=sid)
        trials = repo.list_trials(s, search_id=sid)
        rounds = repo.list_rounds(s, search_id=sid)
        search = repo.get_search(s, search_id=sid)
    assert search.state == "completed" and search.current_round == 1
    assert trials == []  # nothing queued: no worker, no quota, no "waiting for a worker"
    assert [(r.simulator_kind, r.state) for r in rounds] == [("threed-cost-model", "completed")]
    assert rounds[0].finished_at is not None
    assert [c.rank for c in cands] == [1, 2, 3, 4] and {c.status for c in cands} == {"proposed"}
    docs = [ThreeDDocument.model_validate(c.strategy) for c in cands]
    assert len({d.model_dump_json() for d in docs}) == 4  # never the same plan twice
    times = [d.predicted.seconds for d in docs]
    assert times == sorted(times) == [c.predicted_time for c in cands]  # the ranking in order
    assert all(d.memory.fits and d.memory.peak_bytes <= 40e9 for d in docs)
    # the same ranking by hand: OOM plans dropped, and on 80 GB a dropped plan would lead
    cfg = gpt_config(model)
    ranked = rank_plans(cfg, zoo.cluster(CLUSTER), 256, keep_oom=True,
                        plans=[p for p in _plans(cfg) if p.micro_batch in (4, 8, 16)])  # fmt: skip
    oom = [x for x in ranked if not x.memory.fits]
    assert oom and docs[0].out_of_memory_dropped == len(oom) and docs[0].enumerated == len(ranked)
    assert [x.seconds for x in ranked if x.memory.fits][:4] == pytest.approx(times)
    big = rank_plans(cfg, zoo.cluster("A100x8"), 256, plans=[x.plan for x in ranked])
    assert big[0].plan in {x.plan for x in oom}
    assert loop.advance(sid) == "final"  # and it stays completed

    body = client.get(f"{API}/searches/{sid}", headers=tokens["alice"]).json()
    assert body["best_trial_id"] is None and body["best_time"] is None
    result = body["result"]
    assert result["best"] is None and result["ratio"] is None and result["recommended"] is None
    assert result["verdict"].startswith("no measured candidate: 3D plans are predicted only")
    assert (
        "predicted ranking of 4 plans" in result["verdict"]
        and f"candidate:{cands[0].id}" in result["verdict"]
    )
    assert "no plan is recommended" in result["recommended_reason"]
    assert body["state_detail"] in (None, "")  # nobody is told to start a worker
    assert (
        f"{len(oom)} of {len(ranked)} enumerated plans were dropped as predicted out of memory"
        in result["verdict"]
    )
    assert docs[0].layout_text in result["verdict"]

    client.cookies.set("strategist_token", secret(tokens["alice"]))
    html = client.get(f"/ui/searches/{sid}").text
    assert html.count('data-testid="predicted-row"') == 4 and "none was measured" in html
    rows = html.split('data-testid="predicted-row"')[1:]
    for doc, cand, row in zip(docs, cands, rows, strict=True):  # the ranking, best first
        assert f'<td data-testid="plan-label">{doc.summary()}</td>' in row
        assert f"/ui/candidates/{cand.id}" in row and f"{doc.memory.peak_bytes / 1e9:.1f} of 40 GB" in row
        assert "<td>fits</td>" in row
    assert "dropped as predicted out of memory" in html and "predicted only" in html
    round_page = client.get(f"/ui/searches/{sid}/rounds/1")
    assert round_page.status_code == 200 and "threed-cost-model" in round_page.text
    first = cands[0]
    for url in (f"/ui/candidates/{first.id}",):
        page = client.get(url)
        assert page.status_code == 200, (url, page.text[:500])
        text = page.text
        assert f'data-testid="layout">{docs[0].layout_text}<' in text, url
        assert f'data-testid="zero">{docs[0].zero_stage}<' in text and 'data-testid="recompute">' in text
        assert f"{docs[0].num_micro_batches} × {docs[0].micro_batch} samples" in text
        assert 'data-testid="memory-parts"' in text and "optimizer state" in text and "activations" in text
        peak = docs[0].memory.peak_bytes / 1e9
        assert f"{peak:.1f} of 40 GB: fits" in text and f"{peak:.3f}" in text
        assert "predicted only" in text


def _plans(cfg: GPTConfig) -> list[Any]:
    from search.hybrid.threed import enumerate_plans

    return enumerate_plans(cfg, 8, 256, micro_batches=(4, 8, 16), recomputes=("none", "full"))


def test_a_worker_handed_a_3d_trial_refuses_it_saying_why(gpt_zoo: Path) -> None:
    """The service never queues one (above); a trial queued by hand is refused, never measured."""
    m = runner("hybrid_3d")(
        {"kind": "hybrid_3d", "layout": {"tp": 2}}, TrialContext(zoo.model(MODEL), zoo.cluster(CLUSTER), {})
    )
    assert (
        isinstance(m, Measurement)
        and m.failure
        and m.failure.startswith("refused: hybrid_3d plans are predicted only")
    )
    assert not m.iteration_times and m.details["status"] == "refused"


def test_a_huge_bad_value_is_not_echoed_whole(
    client: TestClient, tokens: dict[str, dict[str, str]], gpt_zoo: Path
) -> None:
    r = create(client, tokens["alice"], {"space": "3d", "recompute": ["x" * 100_000]})
    assert r.status_code == 422, r.text[:300]
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "plan_options", "recompute"] and len(detail["msg"]) < 200


# ---------------------------------------------------------------- every interface (issue 43)

CLI_BASE = ["search", "create", "--model", MODEL, "--cluster", CLUSTER, "--token", "t", "--plan", "hybrid"]
CLI_3D = ["--space", "3d", "--global-batch", "256", "--gpus", "8", "--zero-stages", "0,1,2,3",
          "--recompute", "none,full", "--micro-batches", "4,8,16"]  # fmt: skip
OPTIONS_3D = {"space": "3d", "global_batch": 256, "gpus": 8, "zero_stages": [0, 1, 2, 3],
              "recompute": ["none", "full"], "micro_batches": [4, 8, 16]}  # fmt: skip


def test_the_cli_sends_the_3d_options(sent: list[dict[str, Any]]) -> None:
    for extra in (CLI_3D, ["--space", "3d", "--fused-attention", "false,true", "--heads", "16"]):
        r = CliRunner().invoke(app, [*CLI_BASE, *extra])
        assert r.exit_code == 0 and r.output.strip() == "7", r.output
    assert [(b["plan_kind"], b["plan_options"]) for b in sent] == [
        ("hybrid", OPTIONS_3D),
        ("hybrid", {"space": "3d", "fused_attention": [False, True], "heads": 16}),
    ]


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        (["--space", "2d"], "--space"),
        (["--zero-stages", "0,1"], "--zero-stages"),  # without --space 3d
        (["--space", "3d", "--zero-stages", "0,4"], "--zero-stages"),
        (["--space", "3d", "--zero-stages", "one"], "--zero-stages"),
        (["--space", "3d", "--recompute", "none,partial"], "--recompute"),
        (["--space", "3d", "--micro-batches", "4;8"], "--micro-batches"),
        (["--space", "3d", "--fused-attention", "yes"], "--fused-attention"),
        (["--space", "3d", "--annotate", "h=split"], "--annotate"),
    ],
)
def test_bad_3d_cli_options_are_one_line_exit_2(
    sent: list[dict[str, Any]], extra: list[str], option: str
) -> None:
    r = CliRunner().invoke(app, [*CLI_BASE, *extra])
    assert r.exit_code == 2, r.output
    assert r.output.startswith(f"error: {option}") and len(r.output.strip().splitlines()) == 1
    assert sent == []
    r = CliRunner().invoke(app, [*CLI_BASE[:-1], "pipeline", "--space", "3d"])
    assert r.exit_code == 2 and r.output.startswith("error: --space: needs --plan hybrid")


def test_cli_and_client_create_a_3d_search_and_print_its_predicted_ranking(
    client: TestClient,
    tokens: dict[str, dict[str, str]],
    sessions: sessionmaker[Session],
    gpt_zoo: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = secret(tokens["alice"])
    route_cli(monkeypatch, search_cli_commands, client)
    r = CliRunner().invoke(app, [*CLI_BASE[:7], token, *CLI_BASE[8:], *CLI_3D, "--budget", "4"])
    assert r.exit_code == 0, r.output
    sid = int(r.stdout.strip())
    api = api_client(client, token)
    stored = api.search(sid).search
    assert stored.plan_kind == "hybrid" and stored.plan_options == {
        **OPTIONS_3D,
        "fused_attention": [False],
        "heads": 16,
    }
    # the client takes the same options (plan_options, as every kind's)
    other = api.create_search(model=MODEL, cluster=CLUSTER, plan_kind="hybrid", trial_budget=2,
                              plan_options={"space": "3d", "zero_stages": [1], "micro_batches": [4]})  # fmt: skip
    assert other.plan_options is not None and other.plan_options["zero_stages"] == [1]
    with pytest.raises(ApiError) as e:
        api.create_search(
            model=MODEL, cluster=CLUSTER, plan_kind="hybrid", plan_options={"space": "3d", "gpus": 9}
        )
    assert e.value.status == 422 and "plan_options.gpus" in str(e.value)

    assert SearchLoop(sessions).advance(sid, wait_s=WAIT) == "completed"  # no worker
    cands = api.candidates(sid)
    assert [c.rank for c in cands] == [1, 2, 3, 4]
    docs = [ThreeDDocument.model_validate(c.strategy) for c in cands]
    r = CliRunner().invoke(app, ["search", "status", str(sid), "--token", token])
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "predicted ranking (4 3D plans, predicted only: none is measured):" in out
    assert "no measured candidate: 3D plans are predicted only" in out
    lines = [ln for ln in out.splitlines() if ln.lstrip()[:2] in ("1.", "2.", "3.", "4.")]
    assert len(lines) == 4
    for i, (doc, cand, line) in enumerate(zip(docs, cands, lines, strict=True), start=1):
        assert line.strip().startswith(f"{i}. candidate {cand.id}: {doc.summary()}; predicted ")
        assert f"{doc.predicted.seconds * 1e3:.1f} ms/iteration" in line
        assert f"{doc.memory.peak_bytes / 1e9:.1f} of 40 GB per GPU, fits" in line
    r = CliRunner().invoke(app, ["search", "watch", str(sid), "--interval", "0.05", "--token", token])
    assert r.exit_code == 0, r.output
    assert f"search {sid} completed" in r.stdout and "predicted ranking (4 3D plans" in r.stdout
    assert f"1. candidate {cands[0].id}: {docs[0].summary()}" in r.stdout


def test_the_dashboard_form_creates_a_3d_search(
    client: TestClient, tokens: dict[str, dict[str, str]], sessions: sessionmaker[Session], gpt_zoo: Path
) -> None:
    client.cookies.set("strategist_token", secret(tokens["alice"]))
    form_page = client.get("/ui/searches/new").text
    assert 'data-testid="space-3d"' in form_page and 'name="zero_stages"' in form_page
    data = {"model": MODEL, "cluster": CLUSTER, "trial_budget": "3", "candidates_per_round": "3",
            "samples_per_round": "200", "plan": "hybrid", "space": "3d", "global_batch_3d": "256",
            "zero_stages": "1,3", "recompute": "full", "micro_batches": "4,8"}  # fmt: skip
    r = client.post("/ui/searches/new", data=data, follow_redirects=False)
    assert r.status_code == 303, r.text[:2000]
    sid = int(r.headers["location"].rsplit("/", 1)[1])
    with sessions() as s:
        search = repo.get_search(s, search_id=sid)
    assert search.plan_kind == "hybrid" and search.plan_options == {
        "space": "3d", "global_batch": 256, "gpus": 8, "zero_stages": [1, 3], "recompute": ["full"],
        "micro_batches": [4, 8], "fused_attention": [False], "heads": 16,
    }  # fmt: skip
    assert SearchLoop(sessions).advance(sid, wait_s=WAIT) == "completed"
    assert client.get(f"/ui/searches/{sid}").text.count('data-testid="predicted-row"') == 3
    for bad, words in (
        ({"zero_stages": "1;3"}, "zero_stages: must be comma-separated whole numbers"),
        ({"recompute": "partial"}, "plan_options.recompute: must be a non-empty list"),
        ({"plan": "pipeline"}, "space: 3d needs plan hybrid, not pipeline"),
        (
            {"space": "", "global_batch_3d": "", "zero_stages": "", "recompute": "", "micro_batches": "4"},
            "micro_batches: needs space 3d (a hybrid search)",
        ),
    ):
        r = client.post("/ui/searches/new", data=data | bad, follow_redirects=False)
        shown = r.text.split('data-testid="create-error">', 1)[-1].split("</div>", 1)[0]
        assert r.status_code == 422 and words in shown, (bad, r.status_code, shown[:500])


def test_a_3d_search_with_approval_completes_without_asking_for_any(
    client: TestClient, tokens: dict[str, dict[str, str]], sessions: sessionmaker[Session], gpt_zoo: Path
) -> None:
    """Nothing runs, so there is nothing to approve: no round waits and no page offers Approve."""
    r = create(client, tokens["alice"], {"space": "3d", "micro_batches": [4]}, approval_required=True)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    assert SearchLoop(sessions).advance(sid, wait_s=WAIT) == "completed"
    with sessions() as s:
        assert repo.list_trials(s, search_id=sid) == []
        assert [x.state for x in repo.list_rounds(s, search_id=sid)] == ["completed"]
        first = repo.list_candidates(s, search_id=sid)[0]
    client.cookies.set("strategist_token", secret(tokens["alice"]))
    page = client.get(f"/ui/searches/{sid}/rounds/1").text
    assert 'data-testid="approve"' not in page and "threed-cost-model" in page
    assert client.get("/ui/searches").status_code == 200
    decided = client.post(f"{API}/candidates/{first.id}/approve", headers=tokens["alice"])
    assert decided.status_code == 409, decided.text  # the search is completed: nothing to queue
