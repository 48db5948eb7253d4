"""A rehearsal you can watch: ``tdaot rehearse --video`` and ``--plots`` (tdaot.rehearse.video,
tdaot.rehearse.plots) on the project's own robots and packages, no compile of their own (the
quadruped's right package of test_rehearse_mistakes and the arm of test_rehearse, built once a
session under the same names).

Checked: the video exists, is not tiny, and has one frame per 1/fps of the run (decoded: the MP4
through ffmpeg, the GIF through Pillow's n_frames); its frames show the robot moving; an MP4 asked
for without an encoder is written as a GIF, said so; the trajectory holds the whole qpos (a
passive joint's ``qpos.<address>`` column) and the replay uses it; the plots exist, with the
reference's only with ``--reference``, and no base plots for a fixed base.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from test_rehearse import ARM, JOINTS, _cli, _tool, arm  # noqa: F401 - arm: the fixture
from test_rehearse_mistakes import quadruped_contract, quadruped_mjcf, quadruped_policy

pytest.importorskip("mujoco")
pytest.importorskip("OpenGL", reason="PyOpenGL (pip install PyOpenGL): MuJoCo's offscreen renderer needs it")
Image = pytest.importorskip("PIL.Image")
pytest.importorskip("matplotlib")

from tdaot.rehearse import video  # noqa: E402
from tdaot.rehearse.tool import read_trajectory  # noqa: E402

QUADRUPED = Path(__file__).with_name("test_rehearse_mistakes.py")
SECONDS = 2.0
# A wrist the contract does not drive (no motor): its angle is a passive joint's qpos.
PASSIVE_WRIST = """<body name="hand" pos="0.3 0 0">
          <joint name="wrist" type="hinge" axis="0 0 1" damping="0.001"/>
          <geom type="capsule" fromto="0 0 0 0.1 0 0" size="0.02" mass="0.2"/>
        </body>"""


@pytest.fixture(scope="module")
def quadruped(build_package):
    """test_rehearse_mistakes's right package (the same name and options: one build a session)."""
    return build_package(
        "rehearse-quadruped-right", quadruped_policy, {"batch": 1, "contract": quadruped_contract(None)}
    )[2]


def _decoded_frames(path: Path, width: int, height: int) -> list[bytes]:
    ffmpeg = video.find_ffmpeg()
    done = subprocess.run(
        [ffmpeg, "-loglevel", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "gray", "-"],
        capture_output=True,
        check=True,
    )
    size = width * height
    assert len(done.stdout) % size == 0
    return [done.stdout[i : i + size] for i in range(0, len(done.stdout), size)]


def test_the_quadruped_rehearsal_as_an_mp4_and_plots(quadruped, tmp_path, capsys, monkeypatch):
    if video.find_ffmpeg() is None:
        pytest.skip("no ffmpeg (pip install imageio-ffmpeg): the GIF test covers the video")
    monkeypatch.setenv("TDAOT_REHEARSE", _tool())
    mjcf = quadruped_mjcf(tmp_path / "quadruped.xml")
    out, plots = tmp_path / "stand.mp4", tmp_path / "plots"
    code, text, err = _cli(
        capsys, quadruped.path, "--mjcf", mjcf, "--keyframe", "rest", "--seconds", SECONDS,
        "--trajectory", tmp_path / "stand.csv", "--reference", "--factory", f"{QUADRUPED}:quadruped_policy",
        "--steps", "40", "--video", out, "--fps", "25", "--video-size", "160x120", "--plots", plots,
    )  # fmt: skip
    assert code == 0, err
    # 2 s of control steps at 25 frames a second: 50 frames, each decoded from the file.
    assert re.search(
        rf"video {{10}}{re.escape(str(out))}: MP4 \(H\.264\), 50 frames at 25 fps, 160x120", text
    ), text
    assert out.stat().st_size > 5_000
    frames = _decoded_frames(out, 160, 120)
    assert (
        len(frames)
        == 50
        == len(video.frame_rows([r["time"] for r in read_trajectory(tmp_path / "stand.csv")], 25))
    )
    # Not blank, and the robot moves: it stands up from its rest pose.
    assert len(set(frames[0])) > 20
    assert sum(a != b for a, b in zip(frames[0], frames[-1])) > 500

    names = sorted(p.name for p in plots.iterdir())
    assert names == ["base_height.png", "forward_speed.png", "joints.png", "reference.png"]
    assert f"plots          {plots}: base_height.png, forward_speed.png, joints.png, reference.png" in text
    for name in names:
        with Image.open(plots / name) as image:
            assert image.format == "PNG" and image.width >= 400 and image.height >= 200
        assert 5_000 < (plots / name).stat().st_size < 300_000


def _passive_arm(tmp_path: Path) -> str:
    path = tmp_path / "arm_passive_wrist.xml"
    path.write_text(ARM.format(timestep=0.005, elbow="elbow", extra=PASSIVE_WRIST, extra_motor=""))
    return str(path)


def test_a_fixed_base_with_a_passive_joint_as_a_gif(arm, tmp_path, capsys, monkeypatch):  # noqa: F811
    """The arm (no free joint: a still camera, no base plots) with a wrist it does not drive: the
    trajectory carries the wrist's qpos, which moves, and a .gif output is Pillow's."""
    monkeypatch.setenv("TDAOT_REHEARSE", _tool())
    out, plots, csv = tmp_path / "arm.gif", tmp_path / "plots", tmp_path / "arm.csv"
    code, text, err = _cli(
        capsys, arm[2].path, "--mjcf", _passive_arm(tmp_path), "--seconds", "1.5", "--trajectory", csv,
        "--video", out, "--fps", "20", "--video-size", "128x96", "--plots", plots,
    )  # fmt: skip
    assert code == 0, err
    rows = read_trajectory(csv)
    assert [c for c in rows[0] if c.startswith("qpos.")] == ["qpos.2"]  # shoulder 0, elbow 1, wrist 2
    assert abs(rows[-1]["qpos.2"] - rows[0]["qpos.2"]) > 1e-3  # the elbow swings the passive wrist
    assert f"video          {out}: GIF, 30 frames at 20 fps, 128x96" in text
    with Image.open(out) as image:
        assert image.n_frames == 30 and image.size == (128, 96)
    assert out.stat().st_size > 2_000
    assert sorted(p.name for p in plots.iterdir()) == ["joints.png"]


def test_an_mp4_without_an_encoder_is_written_as_a_gif_and_said_so(quadruped, tmp_path, monkeypatch):
    from tdaot.rehearse import run

    mjcf = quadruped_mjcf(tmp_path / "quadruped.xml")
    csv = tmp_path / "stand.csv"
    run(quadruped.path, mjcf, csv, ["--keyframe", "rest", "--seconds", "1"], tool=_tool())
    made = video.write_video(
        mjcf, csv, tmp_path / "stand.mp4", fps=12, size=(96, 64), keyframe="rest", ffmpeg=None
    )
    assert made.format == "gif" and made.path == str(tmp_path / "stand.gif")
    assert "no MP4 encoder" in made.note and "wrote a GIF" in made.note
    assert made.line().startswith(f"video          {made.note}\n")
    assert not (tmp_path / "stand.mp4").exists()
    with Image.open(made.path) as image:
        assert image.n_frames == made.frames == 12


def test_frames_sample_the_control_steps_at_the_frame_rate():
    times = [0.02 * i for i in range(100)]  # 2 s of control steps
    assert video.frame_rows(times, 30) == [int(k / 30 / 0.02 + 1e-6) for k in range(60)]
    assert video.frame_rows(times, 100) == [k // 2 for k in range(200)]  # faster than control: repeated
    assert video.frame_rows(times, 50) == list(range(100))
    assert len(video.frame_rows(times[:7], 30)) == 5  # 0.14 s: frames at 0, 1/30, ..., 4/30
    assert video.frame_rows([], 30) == []


def test_bad_video_options_exit_2(tmp_path, capsys):
    """Refused before the package is read (so a path that is not there does here)."""
    code, _, err = _cli(
        capsys,
        tmp_path / "absent.pt2",
        "--mjcf",
        "x.xml",
        "--video",
        tmp_path / "a.mp4",
        "--video-size",
        "big",
    )
    assert code == 2 and "--video-size: expected WIDTHxHEIGHT, got 'big'" in err
