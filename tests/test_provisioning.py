"""The provisioning tool end to end with --target cpu: signed import, tampering refused, resume, report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from engines.bundle import Bundle
from engines.bundle_store import resolve_bundle_dir
from engines.manifest import MANIFEST_NAME, Artifact, Manifest, sha256_of
from provisioning.cli import main
from provisioning.context import ProvisioningContext
from provisioning.framework import StateStore, run_steps
from provisioning.signing import generate_keypair, sign_bundle
from provisioning.steps import TITLES, build_steps
from tests.test_bundle import small_copy

REPO = Path(__file__).resolve().parents[1]
PASSWORD = "turbine hall 42"


@dataclass
class Site:
    media: Path
    public_key: Path
    private_key: Path
    root: Path
    state: Path
    password_file: Path

    def args(self, *extra: str) -> list[str]:
        return [
            "run", "--target", "cpu", "--no-progress",
            "--state-dir", str(self.state), "--system-root", str(self.root),
            "--media", str(self.media), "--trusted-key", str(self.public_key),
            "--site-name", "Plant 3 reception", "--device-id", "kiosk-07",
            "--admin-password-file", str(self.password_file),
            *extra,
        ]  # fmt: skip

    def state_json(self) -> dict:
        return json.loads((self.state / "state.json").read_text())

    def steps(self) -> dict[str, dict]:
        return self.state_json()["steps"]

    @property
    def bundle_root(self) -> Path:
        return self.root / "var/lib/appliance/bundle"

    @property
    def device_bundle(self) -> Path:
        """The installed bundle: the bundle root's active version, once there is one."""
        return resolve_bundle_dir(self.bundle_root) if self.bundle_root.exists() else self.bundle_root


@pytest.fixture
def site(bundle: Bundle, tmp_path: Path) -> Site:
    media = small_copy(bundle, tmp_path / "media")
    private_key, public_key = tmp_path / "factory.pem", tmp_path / "factory.pub"
    generate_keypair(private_key, public_key)
    assert main(["sign-bundle", "--key", str(private_key), str(media)]) == 0
    password_file = tmp_path / "password.txt"
    password_file.write_text(PASSWORD + "\n")
    return Site(media, public_key, private_key, tmp_path / "root", tmp_path / "state", password_file)


def _flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_signed_bundle_provisions_every_step_and_reports(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = set(os.listdir(tmp_path))
    code = main(site.args())
    out = capsys.readouterr().out
    assert set(os.listdir(tmp_path)) - before == {"root", "state"}  # nothing written elsewhere
    steps = site.steps()
    for name in ("preflight", "bundle", "engines", "site-config", "admin-password", "units", "report"):
        assert steps[name]["status"] == "done", (name, steps[name])
    # The small bundle has no speech or language models, so the self-test turn cannot pass here.
    assert steps["self-test"]["status"] == "failed"
    assert steps["self-test"]["fix"]
    assert code == 1 and "Not finished: self-test" in out

    # the bundle: every file verified and installed, the signature kept with it
    installed = Manifest.read(site.device_bundle)
    assert installed.verify(site.device_bundle, full=True) == []
    assert (site.device_bundle / MANIFEST_NAME).read_bytes() == (site.media / MANIFEST_NAME).read_bytes()
    assert (site.device_bundle / "manifest.json.sig").is_file()
    assert steps["bundle"]["outputs"]["signed_by"].startswith("sha256:")
    assert steps["engines"]["summary"] == "not needed on cpu: ONNX Runtime runs the ONNX graphs"

    # preflight: not a Jetson, said so; no sound card here, not applicable on --target cpu
    checks = {c["name"]: c for c in steps["preflight"]["outputs"]["checks"]}
    assert checks["jetson"]["status"] == "skip" and "not a Jetson" in checks["jetson"]["detail"]
    assert checks["audio"]["status"] in ("skip", "pass")
    assert checks["disk"]["status"] == "pass" and checks["ram"]["status"] == "pass"

    # the site configuration is the appliance's own schema, pointing at the device paths
    from appliance.config import load_settings

    settings = load_settings(site.root / "var/lib/appliance/appliance.toml")
    assert settings.agent.site_name == "Plant 3 reception"
    assert settings.agent.device_id == "kiosk-07"
    assert str(settings.bundle.dir) == "/var/lib/appliance/bundle"

    # the admin password
    from appliance.auth.passwords import check_password_file

    password_path = site.root / "var/lib/appliance/admin-password"
    assert check_password_file(password_path, PASSWORD)
    assert password_path.stat().st_mode & 0o777 == 0o600

    # the units: rendered for this virtual environment, verified, enabled offline
    unit = (site.root / "etc/systemd/system/appliance.service").read_text()
    assert f"ExecStart={sys.prefix}/bin/appliance run --config /var/lib/appliance/appliance.toml" in unit
    assert (site.root / "etc/systemd/system/multi-user.target.wants/appliance.service").is_symlink()
    assert "appliance:x:" in (site.root / "etc/passwd").read_text()
    assert steps["units"]["outputs"]["exposure"]["score"] <= 3.0

    # everything under the state folder belongs to the daemon's user (it edits the configuration)
    passwd_line = next(
        line for line in (site.root / "etc/passwd").read_text().splitlines() if line.startswith("appliance:")
    )
    uid = int(passwd_line.split(":")[2])
    state_root = site.root / "var/lib/appliance"
    for path in [state_root, password_path, state_root / "appliance.toml", *site.device_bundle.rglob("*")]:
        assert path.stat().st_uid == uid, path

    # the report: JSON and text, every step with its outcome and, where it failed, the fix
    report = json.loads((site.state / "report.json").read_text())
    assert report["result"] == "failed" and report["failed_steps"] == ["self-test"]
    assert [s["name"] for s in report["steps"]] == list(TITLES)
    assert report["device"]["device_id"] == "kiosk-07" and report["target"] == "cpu"
    for step in report["steps"]:
        assert step["status"] in ("done", "failed") and step["finished_at"] and step["duration_s"] is not None
    text = (site.state / "report.txt").read_text()
    for number, title in enumerate(TITLES.values(), start=1):
        assert f"{number}. {title}:" in text
    assert "fix: " in text and "audio: " in text

    assert main(["status", "--state-dir", str(site.state)]) == 0
    status = capsys.readouterr().out
    assert all(title in status for title in TITLES.values())


def test_a_file_with_one_changed_byte_is_refused_and_nothing_is_installed(site: Site) -> None:
    _flip_one_byte(site.media / "vad/silero_vad.jit")
    assert main(site.args("--only", "preflight", "--only", "bundle")) == 1
    bundle_step = site.steps()["bundle"]
    assert bundle_step["status"] == "failed"
    assert (
        "content altered (sha256 mismatch against the signed manifest): vad/silero/torchscript"
        in (bundle_step["error"])
    )
    assert "copy the signed bundle again" in bundle_step["fix"]
    assert not site.device_bundle.exists()
    assert list(site.device_bundle.parent.iterdir()) == []  # no staging folder left behind


def test_an_edited_manifest_is_refused_and_the_installed_bundle_is_kept(site: Site) -> None:
    assert main(site.args("--only", "preflight", "--only", "bundle")) == 0
    before = (site.device_bundle / MANIFEST_NAME).read_bytes()

    # Tamper with a file and "fix up" the manifest to match: the signature no longer matches.
    target = site.media / "vad/silero_vad.jit"
    _flip_one_byte(target)
    manifest = json.loads((site.media / MANIFEST_NAME).read_text())
    for art in manifest["artifacts"]:
        if art["path"] == "vad/silero_vad.jit":
            art["sha256"] = sha256_of(target)
    (site.media / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2))

    assert main(site.args("--from", "bundle", "--only", "bundle")) == 1
    step = site.steps()["bundle"]
    assert step["status"] == "failed"
    assert "signature does not match its manifest.json" in step["error"]
    assert (site.device_bundle / MANIFEST_NAME).read_bytes() == before
    assert Manifest.read(site.device_bundle).verify(site.device_bundle, full=True) == []


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("unsigned", "the bundle is not signed"),
        ("other key", "signature does not match"),
        ("no trusted key", "no bundle signing key installed"),
    ],
)
def test_bundles_the_device_cannot_trust_are_refused(
    site: Site, tmp_path: Path, damage: str, message: str
) -> None:
    args = site.args("--only", "preflight", "--only", "bundle")
    if damage == "unsigned":
        (site.media / "manifest.json.sig").unlink()
    elif damage == "other key":
        generate_keypair(tmp_path / "other.pem", tmp_path / "other.pub")
        sign_bundle(site.media, tmp_path / "other.pem")
    else:
        args[args.index("--trusted-key") + 1] = str(tmp_path / "missing.pub")
    assert main(args) == 1
    step = site.steps()["bundle"]
    assert message in step["error"]
    assert step["fix"]
    assert not site.device_bundle.exists()


def test_a_signed_manifest_with_an_unsafe_path_is_refused(site: Site) -> None:
    manifest = json.loads((site.media / MANIFEST_NAME).read_text())
    manifest["artifacts"][0]["path"] = "../../etc/appliance/evil"
    (site.media / MANIFEST_NAME).write_text(json.dumps(manifest))
    sign_bundle(site.media, site.private_key)  # even the factory's key cannot make it write outside
    assert main(site.args("--only", "preflight", "--only", "bundle")) == 1
    assert "unsafe path" in site.steps()["bundle"]["error"]
    assert not (site.root / "etc/appliance/evil").exists()
    assert list(site.device_bundle.parent.iterdir()) == []  # the staging folder is gone


def _wait_for(predicate: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_a_killed_run_resumes_where_it_stopped(site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    # Run until the tool waits for the admin password on stdin, then kill it outright.
    args = site.args()
    index = args.index("--admin-password-file")
    args[index : index + 2] = ["--admin-password-stdin"]
    with subprocess.Popen(
        [sys.executable, "-m", "provisioning", *args],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as proc:
        try:
            _wait_for(
                lambda: (
                    (site.state / "state.json").is_file()
                    and site.steps().get("admin-password", {}).get("status") == "running"
                )
            )
        finally:
            proc.send_signal(signal.SIGKILL)
    steps = site.steps()
    assert [steps[n]["status"] for n in ("preflight", "bundle", "engines", "site-config")] == ["done"] * 4
    assert steps["admin-password"]["status"] == "running"
    assert "units" not in steps
    first_bundle_finish = steps["bundle"]["finished_at"]
    bundle_inode = (site.device_bundle / MANIFEST_NAME).stat().st_ino

    capsys.readouterr()
    main(site.args())
    out = capsys.readouterr().out
    steps = site.steps()
    for title in ("Preflight checks", "Import the engine bundle", "Site configuration"):
        assert f"{title}: done earlier" in out
    assert steps["bundle"]["attempts"] == 1 and steps["bundle"]["finished_at"] == first_bundle_finish
    assert (site.device_bundle / MANIFEST_NAME).stat().st_ino == bundle_inode  # not copied again
    assert steps["admin-password"]["status"] == "done" and steps["admin-password"]["attempts"] == 2
    assert steps["units"]["status"] == "done"
    report = json.loads((site.state / "report.json").read_text())
    assert [s["name"] for s in report["steps"]] == list(TITLES)


def test_sigterm_is_recorded_as_interrupted_and_a_second_run_waits_its_turn(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    args = site.args()
    index = args.index("--admin-password-file")
    args[index : index + 2] = ["--admin-password-stdin"]
    with subprocess.Popen(
        [sys.executable, "-m", "provisioning", *args],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            _wait_for(
                lambda: (
                    (site.state / "state.json").is_file()
                    and site.steps().get("admin-password", {}).get("status") == "running"
                )
            )
            assert main(site.args()) == 2  # the state folder is locked by the running one
            assert "another provisioning run is using" in capsys.readouterr().err
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
    assert proc.returncode == 130
    assert "run the same command again" in err
    step = site.steps()["admin-password"]
    assert step["status"] == "interrupted" and "run the same command again" in step["fix"]


def test_from_reruns_that_step_and_the_later_ones(site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    main(site.args())
    before = site.steps()
    capsys.readouterr()
    main(site.args("--from", "units"))
    after = site.steps()
    for name in ("preflight", "bundle", "engines", "site-config", "admin-password"):
        assert after[name]["attempts"] == before[name]["attempts"] == 1
    assert after["units"]["attempts"] == 2
    assert after["self-test"]["attempts"] == 2


def test_a_deleted_bundle_is_imported_again_on_the_next_run(site: Site) -> None:
    ctx = ProvisioningContext(
        target="cpu",
        state_dir=site.state,
        system_root=site.root,
        media_dir=site.media,
        trusted_key=site.public_key,
        progress=False,
    )
    steps = [s for s in build_steps() if s.name in ("preflight", "bundle")]
    assert run_steps(steps, ctx, StateStore(site.state))["bundle"].status == "done"
    assert run_steps(steps, ctx, StateStore(site.state))["bundle"].status == "skipped"
    (site.device_bundle / "vad/silero_vad.onnx").unlink()
    again = run_steps(steps, ctx, StateStore(site.state))["bundle"]
    assert again.status == "done" and again.attempts == 2
    assert Manifest.read(site.device_bundle).verify(site.device_bundle, full=True) == []


def test_plans_built_on_the_device_survive_a_reimport_of_the_same_bundle(site: Site) -> None:
    assert main(site.args("--only", "preflight", "--only", "bundle")) == 0
    # What the TensorRT builder does on a Jetson: a plan file, recorded in the device's manifest.json.
    plan = site.device_bundle / "asr/whisper-base-tensorrt/encoder-fp16.plan"
    plan.parent.mkdir(parents=True)
    plan.write_bytes(b"plan built on this device")
    manifest = Manifest.read(site.device_bundle)
    manifest.add(
        Artifact(
            "asr/whisper-base/tensorrt/encoder-fp16",
            "asr/whisper-base-tensorrt/encoder-fp16.plan",
            "tensorrt-plan",
            sha256_of(plan),
            plan.stat().st_size,
        )
    )
    manifest.write(site.device_bundle)

    assert main(site.args("--only", "bundle")) == 0  # same media again
    step = site.steps()["bundle"]
    assert step["outputs"]["copied"] is False and "already installed and intact" in step["summary"]
    assert plan.read_bytes() == b"plan built on this device"
    assert "asr/whisper-base/tensorrt/encoder-fp16" in Manifest.read(site.device_bundle).artifacts

    args = site.args("--only", "bundle")
    index = args.index("--media")
    del args[index : index + 2]
    assert main(args) == 0  # no media: the installed bundle is checked against its signed manifest
    assert "kept the installed bundle" in site.steps()["bundle"]["summary"]


def test_invalid_site_settings_are_listed_with_the_fix(site: Site) -> None:
    assert main(site.args("--sip-port", "70000", "--only", "preflight", "--only", "site-config")) == 1
    step = site.steps()["site-config"]
    assert "sip.port" in step["error"] and "65535" in step["error"]
    assert not (site.root / "var/lib/appliance/appliance.toml").exists()


def test_keys_and_signatures_from_the_command_line(tmp_path: Path, site: Site) -> None:
    private, public = tmp_path / "k.pem", tmp_path / "k.pub"
    assert main(["keygen", "--private", str(private), "--public", str(public)]) == 0
    assert private.stat().st_mode & 0o777 == 0o600
    assert main(["keygen", "--private", str(private), "--public", str(public)]) == 1  # never overwrites
    _flip_one_byte(site.media / "vad/silero_vad.onnx")
    assert main(["sign-bundle", "--key", str(private), str(site.media)]) == 1  # refuses a damaged bundle


def test_the_bundle_root_gets_each_import_as_a_version_and_keeps_its_active_one(
    site: Site, bundle: Bundle, tmp_path: Path
) -> None:
    from engines.bundle_store import BundleStore

    assert main(site.args("--only", "preflight", "--only", "bundle")) == 0
    store = BundleStore(site.bundle_root)
    (first,) = store.versions()
    assert store.state().active == first.id and site.steps()["bundle"]["outputs"]["activated"]
    assert "now active" in site.steps()["bundle"]["summary"]
    # A newer bundle from the factory: added beside the first, which stays active until chosen.
    newer = small_copy(bundle, tmp_path / "newer")
    manifest = Manifest.read(newer)
    manifest.meta["release"] = "newer"
    manifest.write(newer)
    assert main(["sign-bundle", "--key", str(site.private_key), str(newer)]) == 0
    assert (
        main(
            [*site.args("--only", "preflight", "--only", "bundle", "--from", "bundle"), "--media", str(newer)]
        )
        == 0
    )
    outputs = site.steps()["bundle"]["outputs"]
    assert outputs["copied"] and not outputs["activated"] and outputs["version"] != first.id
    assert store.state().active == first.id and len(store.versions()) == 2
    assert resolve_bundle_dir(site.bundle_root) == first.path
    store.activate(outputs["version"])
    assert Bundle.open(site.bundle_root, full=True).manifest.meta["release"] == "newer"
    # Two more from the factory: bundle.keep (3) versions stay, the oldest spare one goes, never the
    # active one or the previous one.
    for release in ("third", "fourth"):
        manifest.meta["release"] = release
        manifest.write(newer)
        assert main(["sign-bundle", "--key", str(site.private_key), str(newer)]) == 0
        args = [
            *site.args("--only", "preflight", "--only", "bundle", "--from", "bundle"),
            "--media",
            str(newer),
        ]
        assert main(args) == 0
    kept = {v.id: Manifest.read(v.path).meta.get("release") for v in store.versions()}
    assert sorted(kept.values(), key=str) == sorted([None, "newer", "fourth"], key=str)
    assert (
        site.steps()["bundle"]["outputs"]["pruned"]
        and "removed old version" in site.steps()["bundle"]["summary"]
    )
    assert store.state().active in kept and store.state().previous == first.id


def test_a_version_made_on_the_device_is_kept_without_a_signature(site: Site, bundle: Bundle) -> None:
    from build_scripts.add_model import add_model
    from engines.bundle_store import BundleStore

    assert main(site.args("--only", "preflight", "--only", "bundle")) == 0
    added = add_model(site.bundle_root, bundle.path("llm/gemma-270m"), "gemma-270m")
    BundleStore(site.bundle_root).activate(added.version.id)
    args = site.args("--only", "preflight", "--only", "bundle", "--from", "bundle")
    at = args.index("--media")
    without_media = args[:at] + args[at + 2 :]
    assert main(without_media) == 0
    assert "made on this device from a signed one and intact" in site.steps()["bundle"]["summary"]
    # ... and a damaged one is not.
    (added.version.path / "vad/silero_vad.onnx").unlink()
    assert main(without_media) == 1
    assert "damaged" in site.steps()["bundle"]["error"]


def test_a_second_device_is_set_up_from_the_first_ones_signed_export(site: Site, tmp_path: Path) -> None:
    facts = tmp_path / "facts.md"
    facts.write_text("# Canteen\nThe canteen opens at 7.\n")
    site_file = tmp_path / "site.toml"
    site_file.write_text(
        "# Plant 3, agreed with site IT\n"
        "[audio]\n"
        "echo_delay_ms = 42\n"
        "\n"
        "[[agent.tools]]\n"
        'name = "site_facts"\n'
        'kind = "facts"\n'
        'description = "the site\'s facts"  # canteen, parking\n'
        f'file = "{facts}"\n'
    )
    first = ("--only", "preflight", "--only", "bundle", "--only", "site-config")
    assert main(site.args(*first, "--site-file", str(site_file))) == 0
    site_private, site_public = tmp_path / "site.pem", tmp_path / "site.pub"
    generate_keypair(site_private, site_public)
    export = tmp_path / "usb" / "plant3"
    code = main(["export", "--out", str(export), "--key", str(site_private), "--system-root", str(site.root)])
    assert code == 0

    second_root, second_state = tmp_path / "second", tmp_path / "second-state"

    def second(*extra: str) -> int:
        return main(
            [
                "run", "--target", "cpu", "--no-progress", "--state-dir", str(second_state),
                "--system-root", str(second_root), "--media", str(site.media),
                "--trusted-key", str(site.public_key), "--device-id", "kiosk-08",
                "--admin-password-file", str(site.password_file), *first, *extra,
            ]
        )  # fmt: skip

    assert second("--clone", str(export), "--site-key", str(site_public)) == 0
    text = (second_root / "var/lib/appliance/appliance.toml").read_text()
    assert text.startswith("# Plant 3, agreed with site IT\n") and "# canteen, parking" in text
    assert 'file = "/var/lib/appliance/site/facts.md"' in text
    assert (second_root / "var/lib/appliance/site/facts.md").read_text() == facts.read_text()
    from appliance.config import load_settings

    settings = load_settings(second_root / "var/lib/appliance/appliance.toml")
    assert settings.agent.site_name == "Plant 3 reception" and settings.agent.device_id == "kiosk-08"
    assert settings.audio.echo_delay_ms != 42  # measured per room, not copied
    step = json.loads((second_state / "state.json").read_text())["steps"]["site-config"]
    cloned = step["outputs"]["cloned"]
    assert cloned["from_device"] == "kiosk-07" and cloned["signed_by"].startswith("sha256:")
    assert cloned["bundle_version"] == resolve_bundle_dir(site.bundle_root).name

    # An export changed on the way, or checked with another site's key, is refused; nothing changes.
    (export / "files/facts.md").write_text("# Canteen\nThe canteen opens at 5.\n")
    assert second("--clone", str(export), "--site-key", str(site_public), "--from", "site-config") == 1
    step = json.loads((second_state / "state.json").read_text())["steps"]["site-config"]
    assert "changed after the export was signed" in step["error"]
    other_private, other_public = tmp_path / "other.pem", tmp_path / "other.pub"
    generate_keypair(other_private, other_public)
    assert second("--clone", str(export), "--site-key", str(other_public), "--from", "site-config") == 1
    step = json.loads((second_state / "state.json").read_text())["steps"]["site-config"]
    assert "not signed by the site's key" in step["error"]
    assert (second_root / "var/lib/appliance/site/facts.md").read_text() == facts.read_text()
