"""Live estimates in background runs (deffcore.work.jobs): the job's status holds them,
"stop when settled" keeps a run of that N, documents runs have none."""

from __future__ import annotations

from deffcore.extraction import cache
from deffcore.inputs.run_spec import RunSpec
from deffcore.statistics.stopping import CONFIRM, MIN_STOP_N
from deffcore.work import jobs


def _spec(dataset: str, n: int, passages: str = "windows") -> RunSpec:
    return RunSpec(
        model="tiny-llama",
        revision=None,
        dataset=dataset,
        n=n,
        max_tokens=16,
        seed=0,
        dtype="float32",
        passages=passages,
    )


def test_a_window_job_keeps_its_estimates(windows_dataset, every_batch):
    spec = _spec(windows_dataset, 256)
    st = jobs.wait(jobs.start(spec, device="cpu", batch_size=32), timeout=600)
    assert st.state == "done", st.error
    assert [e["n"] for e in st.estimates] == [32, 64, 128]  # the landed run itself is the page's
    assert set(st.estimates[0]["poolings"]) >= {"default", "top1_pc"}
    assert all(e["position0"]["paired"] or e["position0"]["identical"] for e in st.estimates)
    assert st.stopped_at is None and st.result_key == spec.key()


def test_stop_when_settled_keeps_a_run_of_that_n(windows_dataset, every_batch, planted):
    # tiny-llama puts its BOS first in every window of 16 tokens: no_pos0 is the same control
    # as default, so the BOS answer is certain ("not an artefact") at every mark; the guard then
    # stops at the first mark with >= MIN_STOP_N passages and CONFIRM definite answers in a
    # row: the marks are 32, 64, 128, ..., so exactly at 128
    spec = _spec(windows_dataset, 1024)
    job_id = jobs.start(spec, device="cpu", batch_size=32)
    assert jobs.stop_when_settled(job_id, "verdict")
    st = jobs.wait(job_id, timeout=600)
    assert st.state == "done", st.error
    marks = [e["n"] for e in st.estimates]
    want = next(
        m for i, m in enumerate(marks) if m >= MIN_STOP_N and i + 1 >= CONFIRM
    )  # every answer here is definite (checked next)
    assert all(e["position0"]["verdict"] == "not_artefact" for e in st.estimates)
    assert st.until == "verdict" and st.stopped_at == want == 128
    assert marks[-1] == st.stopped_at
    kept = jobs.load_result(st.result_key)
    assert kept.n == st.stopped_at and kept.spec.n == st.stopped_at
    assert cache.load(spec) is None  # no 1,024-run, complete or partial
    assert not jobs.stop_when_settled(job_id)  # finished


def test_documents_jobs_cannot_stop_early(tiny_dataset):
    spec = _spec(tiny_dataset, 8, passages="documents")
    job_id = jobs.start(spec, device="cpu", batch_size=4)
    assert not jobs.stop_when_settled(job_id)
    st = jobs.wait(job_id, timeout=600)
    # 8 passages: below the first look (32), so the landed run is the only estimate (the page's)
    assert st.state == "done" and st.estimates == () and st.until is None
