"""Rollouts on a live pipeline with real models, real signatures and real archives: committed, or rolled back."""

from __future__ import annotations

import http.server
import json
import shutil
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from live_rollout import FAST, TOPICS, Box, signed_release, versions_in_order, wait_for_results

from edge_runtime.config.rollout import RolloutSettings
from edge_runtime.package.archive import pack, unpack
from edge_runtime.package.loader import sha256_of
from edge_runtime.package.signing import generate_keys, read_public_key
from edge_runtime.package.trust import TrustPolicy
from edge_runtime.placement.loading import look_at_box
from edge_runtime.placement.model_pool import ModelPool
from edge_runtime.rollout.manager import RolloutHost, RolloutRequest, Rollouts
from edge_runtime.rollout.state import RolloutRecord, Stage


def test_a_good_release_is_committed_and_takes_over_between_two_frames(box: Box, face_package_dir: Path) -> None:
    archive = signed_release(face_package_dir, box.root / "v2", box.key, 2, "2.0")
    record = box.run(box.request("r-2", archive))
    assert record.stage is Stage.COMMITTED, record.reason
    assert [step.stage for step in record.steps] == [
        Stage.DOWNLOADING, Stage.VERIFIED, Stage.STAGED, Stage.SHADOW, Stage.ACTIVE, Stage.PROBATION, Stage.COMMITTED,
    ]  # fmt: skip
    assert record.checks["shadow"]["faces"]["passed"] and record.checks["probation"]["faces"]["passed"]
    wait_for_results(box, 10)
    box.pipeline.stop()
    results = box.results()
    assert [m["index"] for m in results] == list(range(len(results)))  # no frame lost or published twice
    assert versions_in_order(results) == ["1.0", "2.0"]
    active = box.pool.store.active(box.package)
    assert active is not None and active.release == 2
    assert box.trust.releases.installed(box.package) == 2  # later loads refuse release 1 now
    assert box.retained[TOPICS.rollout("r-2")]["stage"] == "committed"


def test_a_release_slower_than_the_bound_is_rolled_back_in_the_shadow(box: Box, face_package_dir: Path) -> None:
    box.rollouts.settings = RolloutSettings.model_validate(FAST | {"shadow": {"items": 8, "max_latency_ratio": 0.01}})
    archive = signed_release(face_package_dir, box.root / "v2", box.key, 2, "2.0")
    record = box.run(box.request("slow", archive))
    assert record.stage is Stage.ROLLED_BACK
    assert record.reason.startswith("shadow of pipeline faces: the new model takes ")
    assert record.checks["shadow"]["faces"]["passed"] is False
    assert versions_in_order(box.results()) == ["1.0"]  # the old release ran throughout
    assert box.pool.store.active(box.package) is None and box.trust.releases.installed(box.package) == 1
    assert box.retained[TOPICS.rollout("slow")]["reason"] == record.reason


def test_an_abort_during_probation_switches_back_between_two_frames(box: Box, face_package_dir: Path) -> None:
    box.rollouts.settings = RolloutSettings.model_validate(FAST | {"probation": {"seconds": 60.0}})
    archive = signed_release(face_package_dir, box.root / "v2", box.key, 2, "2.0")
    box.rollouts.start(box.request("r-2", archive))
    for _ in range(600):
        record = box.rollouts.journal.get("r-2")
        if record is not None and record.stage is Stage.PROBATION:
            break
        threading.Event().wait(0.05)
    wait_for_results(box, 10)
    box.rollouts.abort("r-2")
    record = box.rollouts.wait(30)
    assert record is not None and record.stage is Stage.ROLLED_BACK and record.reason == "aborted during probation"
    wait_for_results(box, 10)
    box.pipeline.stop()
    results = box.results()
    assert [m["index"] for m in results] == list(range(len(results)))
    assert versions_in_order(results) == ["1.0", "2.0", "1.0"]
    assert box.pool.store.active(box.package) is None and box.trust.releases.installed(box.package) == 1


def test_refused_archives_never_reach_the_pipeline(box: Box, face_package_dir: Path, tmp_path: Path) -> None:
    good = signed_release(face_package_dir, box.root / "v2", box.key, 2, "2.0")
    other_key, _ = generate_keys("stranger", tmp_path / "stranger")
    stranger = signed_release(face_package_dir, box.root / "v3", other_key, 3, "3.0")
    older = signed_release(face_package_dir, box.root / "v0", box.key, 0, "0.9")
    escape = box.root / "escape.tar"
    with tarfile.open(escape, "w") as archive:
        archive.add(face_package_dir / "model.yaml", arcname="../outside.yaml")
    unsigned_dir = box.root / "unsigned"
    shutil.copytree(face_package_dir, unsigned_dir)
    unsigned = pack(unsigned_dir, box.root / "unsigned.tar")
    cases = {
        "wrong-digest": (box.request("wrong-digest", good, sha256="0" * 64), "sha256"),
        "stranger": (box.request("stranger", stranger), "signed by unknown key"),
        "older": (box.request("older", older), "rollback attack"),
        "escape": (box.request("escape", escape), ".."),
        "unsigned": (box.request("unsigned", unsigned), "unsigned"),
        "other-name": (box.request("other-name", good, package="someone_else"), "not someone_else"),
    }
    for rollout_id, (request, why) in cases.items():
        record = box.run(request)
        assert record.stage is Stage.ROLLED_BACK and why in record.reason, (rollout_id, record.reason)
        assert [step.stage for step in record.steps] == [Stage.DOWNLOADING, Stage.ROLLED_BACK]
    assert not (box.root / "outside.yaml").exists() and not (box.root / "state" / "outside.yaml").exists()
    assert versions_in_order(box.results()) == ["1.0"]
    assert box.pool.store.installed(box.package) == []


def test_archives_the_unpacker_refuses_are_counted_for_the_stats(box: Box, face_package_dir: Path) -> None:
    """A box that keeps being sent hostile archives is worth a look even when each one was stopped: the
    refusals are counted; an archive refused for its signature is not the unpacker's and is not."""
    escape = box.root / "escape.tar"
    with tarfile.open(escape, "w") as archive:
        archive.add(face_package_dir / "model.yaml", arcname="../outside.yaml")
    link = box.root / "link.tar"
    with tarfile.open(link, "w") as archive:
        member = tarfile.TarInfo("package/model.yaml")
        member.type, member.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(member)
    unsigned_dir = box.root / "unsigned"
    shutil.copytree(face_package_dir, unsigned_dir)
    unsigned = pack(unsigned_dir, box.root / "unsigned.tar")
    assert box.rollouts.figures() == {"archives_refused": 0}
    for rollout_id, archive_path in (("escape", escape), ("link", link), ("unsigned", unsigned)):
        record = box.run(box.request(rollout_id, archive_path))
        assert record.stage is Stage.ROLLED_BACK, record.reason
    assert box.rollouts.figures() == {"archives_refused": 2}


def test_a_rollout_cut_short_is_rolled_back_at_the_next_start(box: Box, face_package_dir: Path) -> None:
    """What a restart finds after a stop at any step: the release before runs, and the record says why."""
    archive = signed_release(face_package_dir, box.root / "v2", box.key, 2, "2.0")
    record = box.run(box.request("r-2", archive))
    assert record.stage is Stage.COMMITTED
    journal, store = box.rollouts.journal, box.pool.store
    later = (Stage.VERIFIED, Stage.STAGED, Stage.SHADOW, Stage.ACTIVE, Stage.PROBATION)
    for stopped_at in (Stage.DOWNLOADING, *later):
        rollout_id = f"cut-{stopped_at.value}"
        current = journal.begin(RolloutRecord(rollout_id, box.package, "x", "0" * 64, previous_release=2))
        for step in later[: later.index(stopped_at) + 1] if stopped_at in later else ():
            current = journal.advance(current, step, release=3 if step is Stage.VERIFIED else current.release)
        if stopped_at in (Stage.ACTIVE, Stage.PROBATION):
            staged = store.staging(rollout_id) / "package"
            store.install(box.package, 3, shutil.copytree(face_package_dir, staged))
            store.activate(box.package, 3)  # the pointer had moved when the box stopped
        (recovered,) = box.rollouts.recover()
        assert recovered.stage is Stage.ROLLED_BACK, stopped_at
        assert recovered.reason == f"the box stopped while the rollout was {stopped_at.value}; the release before runs"
        active = store.active(box.package)
        assert active is not None and active.release == 2, stopped_at
        assert box.retained[TOPICS.rollout(rollout_id)]["stage"] == "rolled_back"


class Stalling(http.server.SimpleHTTPRequestHandler):
    """Serves the files of its directory; `/500/...` always answers 500, `/stall/...` sends a few bytes and stops."""

    def do_GET(self) -> None:
        if self.path.startswith("/500/"):
            self.send_error(500)
            return
        if self.path.startswith("/stall/"):
            self.send_response(200)
            self.send_header("Content-Length", "1000000")
            self.end_headers()
            self.wfile.write(b"x" * 1000)
            self.wfile.flush()
            self.server.stalled.set()  # type: ignore[attr-defined]
            self.server.release.wait(30)  # type: ignore[attr-defined]
            return
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serving_files(directory: Path) -> Iterator[tuple[str, threading.Event]]:
    """A real HTTP server on a loopback port for `directory`: its base URL, and an event set once it stalls."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Stalling, directory=str(directory)))
    server.stalled = threading.Event()  # type: ignore[attr-defined]
    server.release = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.stalled  # type: ignore[attr-defined]
    finally:
        server.release.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()


def test_every_failure_after_a_commit_goes_back_to_the_committed_release(box: Box, face_package_dir: Path) -> None:
    """The release a rollout replaces is recorded before its first step: a rollout that fails before its
    archive is verified, or a box killed while downloading, keeps release 2 running after a commit of 2,
    rather than the config's release 1, which the box refuses from then on as a rollback attack."""
    box.rollouts.settings = RolloutSettings.model_validate(FAST | {"download_attempts": 2, "download_timeout_s": 5})
    archive = signed_release(face_package_dir, box.root / "v2", box.key, 2, "2.0")
    assert box.run(box.request("r-2", archive)).stage is Stage.COMMITTED
    corrupted = box.root / "corrupted.tar"
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0x01
    corrupted.write_bytes(data)
    store, journal = box.pool.store, box.rollouts.journal

    def still_on_release_2(why: str) -> None:
        active = store.active(box.package)
        assert active is not None and active.release == 2, why
        assert box.trust.releases.installed(box.package) == 2, why

    with serving_files(box.root) as (url, stalled):
        cases = {
            "mistyped": (f"{url}/v2/release-2.tarr", "404"),
            "always-500": (f"{url}/500/release-2.tar", "500"),
            "corrupted": (f"{url}/corrupted.tar", "sha256 is"),
            "too-big": (f"{url}/v2/release-2.tar", "more than the limit"),
        }
        for rollout_id, (source, why) in cases.items():
            if rollout_id == "too-big":
                box.rollouts.settings = box.rollouts.settings.model_copy(update={"max_bytes": 1000})
            record = box.run(box.request(rollout_id, archive, source=source))
            assert record.stage is Stage.ROLLED_BACK and why in record.reason, (rollout_id, record.reason)
            assert record.previous_release == 2, rollout_id
            still_on_release_2(rollout_id)
        # a box killed while downloading: what is on disk at that instant is what the next start finds
        box.rollouts.start(box.request("killed", archive, source=f"{url}/stall/release-2.tar"))
        assert stalled.wait(30)
        on_disk = journal.path("killed").read_bytes()
        box.rollouts.close()
        journal.path("killed").write_bytes(on_disk)
    (recovered,) = box.rollouts.recover()
    assert recovered.rollout_id == "killed" and recovered.previous_release == 2
    still_on_release_2("killed while downloading")
    journal.begin(RolloutRecord("older-version", box.package, "x", "0" * 64))  # such records said None
    (recovered,) = box.rollouts.recover()
    assert recovered.rollout_id == "older-version"
    still_on_release_2("a record an older version left at downloading")
    # the next start loads release 2 for the config's package, as the daemon does
    box.pipeline.stop()
    restarted = ModelPool(look_at_box(), box.root / "state", box.root / "cache2", box.trust)
    try:
        model = restarted.acquire("faces", box.config.model, box.root / "config.yaml")
        assert model.package.manifest.version == "2.0"
    finally:
        restarted.close()


def test_an_abort_during_the_download_says_what_becomes_of_the_bytes(box: Box, face_package_dir: Path) -> None:
    archive = signed_release(face_package_dir, box.root / "v2", box.key, 2, "2.0")
    with serving_files(box.root) as (url, stalled):
        box.rollouts.start(box.request("stopped", archive, source=f"{url}/stall/release-2.tar"))
        assert stalled.wait(30)
        box.rollouts.abort("stopped")
        record = box.rollouts.wait(30)
    assert record is not None and record.stage is Stage.ROLLED_BACK
    assert record.reason == "aborted during the download; the bytes fetched are removed"
    assert not (box.pool.store.root / ".staging" / "stopped").exists()


def test_a_download_past_its_deadline_fails_the_rollout_naming_the_setting(box: Box, face_package_dir: Path) -> None:
    """A server that stalls within the per-read timeout's reach would hold the box in `downloading`."""
    box.rollouts.settings = RolloutSettings.model_validate(FAST | {"download_deadline_s": 1})
    archive = signed_release(face_package_dir, box.root / "v2", box.key, 2, "2.0")
    with serving_files(box.root) as (url, _):
        record = box.run(box.request("slow", archive, source=f"{url}/stall/release-2.tar"))
    assert record.stage is Stage.ROLLED_BACK
    assert "not finished within its deadline of 1 s (1000 bytes fetched)" in record.reason, record.reason
    assert record.reason.endswith("; rollout.download_deadline_s sets the deadline")
    assert not (box.pool.store.root / ".staging" / "slow").exists()


def test_a_package_only_served_rolls_out_and_back_on_failed_requests(face_package_dir: Path, tmp_path: Path) -> None:
    """No pipeline runs it: the new release is judged on its fidelity, then on the requests it answers."""
    import http.client

    from edge_runtime.config.serving import ServeSettings
    from edge_runtime.serving.service import Serving

    private, public = generate_keys("ops", tmp_path / "keys")
    state = tmp_path / "state"
    trust = TrustPolicy.build([read_public_key(public)], None, state)
    first = unpack(signed_release(face_package_dir, tmp_path / "v1", private, 1, "1.0"), tmp_path / "installed")
    pool = ModelPool(look_at_box(), state, tmp_path / "cache", trust)
    settings = ServeSettings.model_validate({"http": {"port": 0}, "models": [{"name": "faces", "path": str(first)}]})
    serving = Serving(settings, "box", pool, tmp_path / "config.yaml")
    serving.start()
    host = RolloutHost(
        pool=pool, config_file=tmp_path / "config.yaml", pipelines=dict, pipeline_config=lambda name: None,  # type: ignore[arg-type,return-value]
        publish=lambda topic, payload: None, topics=TOPICS, serving=lambda: serving,
    )  # fmt: skip
    rollouts = Rollouts(host, RolloutSettings.model_validate(FAST | {"probation": {"seconds": 3.0}}), state, trust)
    jpeg = (Path(__file__).resolve().parents[2] / "samples/images/astronaut.jpg").read_bytes()

    def ask() -> tuple[int, dict[str, Any]]:
        connection = http.client.HTTPConnection("127.0.0.1", serving.port, timeout=30)
        connection.request("POST", "/v2/models/faces/infer", jpeg, {"Content-Type": "image/jpeg"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())

    def run(rollout_id: str, archive: Path) -> Any:
        rollouts.start(RolloutRequest(rollout_id, "face_detection_short_range", str(archive), sha256_of(archive)))
        while (record := rollouts.wait(0.2)) is None:
            ask()  # a client keeps asking throughout
        return record

    def broken_decoder(manifest: dict[str, Any], root: Path) -> None:
        manifest["decoder"]["params"]["num_layers"] = 5

    try:
        good = run("r-2", signed_release(face_package_dir, tmp_path / "v2", private, 2, "2.0"))
        assert good.stage is Stage.COMMITTED, good.reason
        assert good.checks["shadow"]["serve:faces"]["passed"]
        assert ask()[1]["model"]["version"] == "2.0"
        bad = run("r-3", signed_release(face_package_dir, tmp_path / "v3", private, 3, "3.0", edit=broken_decoder))
        assert bad.stage is Stage.ROLLED_BACK
        assert bad.reason.startswith("probation failed: served models faces: ") and "requests failed" in bad.reason
        status, answer = ask()
        assert status == 200 and answer["model"]["version"] == "2.0"  # the release before answers again
        active = pool.store.active("face_detection_short_range")
        assert active is not None and active.release == 2
    finally:
        rollouts.close()
        serving.stop()
        pool.close()
