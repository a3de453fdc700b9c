"""The C++ Swin UNETR trainer's preprocessing (examples/swin_unetr/train_data.cpp `preprocess`)
against MONAI's chain run here in Python on the same files.

`voxaug_swin_train --dump-preprocessed DIR` writes each subject's cached volumes (image, label,
affine) and exits; the reference is the deterministic part of MONAI's BTCV pipeline as
examples/swin_unetr/pipelines.py runs it:
  LoadImaged (NibabelReader) -> EnsureChannelFirstd -> Orientationd("RAS")
  -> Spacingd(pixdim, mode (bilinear, nearest), its defaults: border, align_corners False)
  -> ScaleIntensityRanged(a_min, a_max, 0, 1, clip) -> CropForegroundd(source image, > 0)
  -> SpatialPadd(roi).
Data: --dataset mricron (ch2 + AAL merged into 6 structures, the trainer's classes), and a tiny
MSD directory from test_train_cpp.write_msd (axes permuted and flipped) whose second and third
subjects are re-saved with an oblique and an oblique + sheared affine.

Tolerances:
- Shapes: identical. Affines (MONAI's MetaTensor.affine after the crop and the pad): within
  1e-6 mm (both are MONAI's float64 geometry; observed <= 1e-12).
- Images: MONAI interpolates in float64 (Spacing's default dtype), voxaug in float32, both then
  scaled to [0, 1]: |C++ - MONAI| <= IMG_TOL = 1e-4 of that range (as tests/python/test_spacing.py;
  observed: 0 for ch2 (weights 0, 1/2, 1), <= 7e-7 for the MSD subjects).
- Labels (nearest): identical except at half-voxel ties, where a source coordinate lies half-way
  (within float32 resolution) between two voxels of different labels: voxaug maps coordinates in
  float32 and rounds an exact half to even; MONAI rounds grid_sample's float64 normalised
  coordinate, which lands a few ulp either side of the half (and, with the float32 sform of a
  rotated file, ~1e-8 to one side on every plane). Pixdim 1.5 on a 1 mm grid puts every other plane
  on a half (every fourth on a 2 mm grid), so label boundaries on those planes are ties. Every
  differing voxel must be such a tie, with both results among the tied neighbours' labels (checked
  from the affines here), and ties may be at most LABEL_TIES = 0.5% of the voxels: observed 380 of
  1.55 M (0.025%) for ch2 at 1.5 x 1.5 x 2; 60 / 170 / 89 of ~50 k (0.1-0.4%) for the tiny MSD
  subjects, which are mostly boundary (two ellipsoids of 4-8 voxel radii); none at pixdim 3.
- CropForeground trap: MONAI's Spacing leaves ~1e-15 (not 0) where ch2's zero background meets the
  head at a grid point that falls exactly on a voxel (its normalised grid does not hit the voxel
  exactly), and CropForeground (> 0) can then keep one slice more than the exact result (the
  existing test_mricron_dataset saw it at pixdim 3). The reference sets MONAI's resampled values
  below RESIDUE = 1e-6 to 0 before ScaleIntensityRange: ch2's intensities are integers and at these
  pixdims the bilinear weights are 0, 1/2 or 1, so every true non-zero value is >= 1/8 and nothing
  but rounding residue is removed (7968 values at 1.5 x 1.5 x 2, 2434 at 3). Without this, MONAI's
  box at pixdim 3 is 61 x 72 x 60 instead of 61 x 72 x 59; at 1.5 x 1.5 x 2 it is unchanged.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from test_train_cpp import BUILD, TRAIN, run, write_msd  # the same binary and skip logic

pytestmark = pytest.mark.skipif(
    TRAIN is None,
    reason=f"voxaug_swin_train not built (looked in {BUILD}; set VOXAUG_BUILD_DIR to the CMake "
    "build dir and build the voxaug_swin_train target)",
)

TEMPLATES = Path("/usr/share/mricron/templates")
ROI = 32  # mricron: the crop sets the shape
MSD_ROI = 64  # the tiny MSD subjects (32-45 voxels an axis after Spacing) are padded
IMG_TOL = 1e-4
LABEL_TIES = 5e-3
RESIDUE = 1e-6
# The trainer's mricron classes (train_data.cpp mricron_classes; pipelines.py AAL_STRUCTURES).
AAL = ((71, 72), (73, 74), (75, 76), (77, 78), (37, 38), (41, 42))


def monai_chain(image: str, label: str, pixdim, a_min: float, a_max: float, roi: int, label_map=None,
                zero_residues: bool = False) -> dict:
    """MONAI's preprocessing of one subject: {"final": the chain's dict, "oriented": Orientationd's
    output, "spaced_shape" / "spaced_affine": Spacingd's output grid, "residues": how many values
    were set to 0}."""
    mt = pytest.importorskip("monai.transforms")
    keys = ["image", "label"]
    d = mt.LoadImaged(keys, reader="NibabelReader")({"image": image, "label": label})
    d = mt.EnsureChannelFirstd(keys)(d)
    if label_map is not None:
        d["label"] = label_map(d["label"])
    oriented = mt.Orientationd(keys, axcodes="RAS", labels=(("L", "R"), ("P", "A"), ("I", "S")))(d)
    d = mt.Spacingd(keys, pixdim=pixdim, mode=("bilinear", "nearest"))(dict(oriented))
    spaced_shape, spaced_affine = tuple(d["image"].shape[1:]), d["image"].affine.numpy().copy()
    residues = 0
    if zero_residues:
        img = d["image"]
        small = (img != 0) & (img.abs() < RESIDUE)
        residues = int(small.sum())
        img[small] = 0
    d = mt.ScaleIntensityRanged("image", a_min, a_max, 0.0, 1.0, clip=True)(d)
    d = mt.CropForegroundd(keys, source_key="image", select_fn=lambda x: x > 0)(d)
    d = mt.SpatialPadd(keys, (roi, roi, roi))(d)
    return {"final": d, "oriented": oriented, "spaced_shape": spaced_shape, "spaced_affine": spaced_affine,
            "residues": residues}


def label_ties(got: np.ndarray, ref: np.ndarray, chain: dict) -> int:
    """Checks that every voxel where the labels differ lies on Spacing's grid (not in the pad) and
    is a half-voxel tie of the nearest-neighbour lookup into the oriented label whose candidates
    include both labels; returns how many differ."""
    idx = np.argwhere(got != ref)
    if len(idx) == 0:
        return 0
    out_affine = chain["final"]["label"].affine.numpy()
    src = chain["oriented"]["label"].as_tensor()[0].round().to(torch.int64).numpy()
    src_affine = chain["oriented"]["label"].affine.numpy()
    to_grid = np.linalg.solve(chain["spaced_affine"], out_affine)
    on_grid = np.round(idx @ to_grid[:3, :3].T + to_grid[:3, 3])
    inside = ((on_grid >= 0) & (on_grid < np.array(chain["spaced_shape"]))).all(axis=1)
    assert inside.all(), f"labels differ in the padding at {idx[~inside][:5]}"
    to_src = np.linalg.solve(src_affine, out_affine)
    coord = idx.astype(np.float64) @ to_src[:3, :3].T + to_src[:3, 3]
    frac = coord - np.floor(coord)
    # A half within float32 resolution of the coordinate (voxaug maps coordinates in float32).
    tie = np.abs(frac - 0.5) <= 4 * np.finfo(np.float32).eps * np.maximum(np.abs(coord), 1.0)
    assert tie.any(axis=1).all(), (f"labels differ at non-tie voxels: {idx[~tie.any(axis=1)][:5]}, "
                                   f"source coordinates {coord[~tie.any(axis=1)][:5]}")
    hi = np.array(src.shape) - 1
    for p, c, t in zip(idx, coord, tie):
        # Every combination of the two neighbours on the tied axes, nearest on the others,
        # clamped (border padding).
        options = [[np.floor(x), np.floor(x) + 1] if ti else [np.round(x)] for x, ti in zip(c, t)]
        cands = {int(src[tuple(np.clip(np.array([a, b, e], np.int64), 0, hi))])
                 for a in options[0] for b in options[1] for e in options[2]}
        assert {int(got[tuple(p)]), int(ref[tuple(p)])} <= cands, (p, c, cands)
    return len(idx)


def compare(dumped: dict, chain: dict, what: str) -> dict:
    """Dumped volumes vs MONAI's (monai_chain's result): shapes, affine, image within IMG_TOL,
    labels up to ties."""
    img, lab = dumped["image"], dumped["label"]
    ref = chain["final"]
    assert img.dtype == torch.float32 and lab.dtype == torch.uint8, what
    r_img, r_lab = ref["image"].as_tensor(), ref["label"].as_tensor()
    assert img.shape[1:] == r_img.shape == r_lab.shape and img.shape[0] == 1, (what, img.shape, r_img.shape)
    np.testing.assert_allclose(dumped["affine"].numpy(), ref["image"].affine.numpy(), rtol=0, atol=1e-6,
                               err_msg=what)
    assert torch.isfinite(img).all() and img.max() > 0.5, what  # not blank
    err = (img[0].double() - r_img.double()).abs().max().item()
    assert err <= IMG_TOL, f"{what}: image differs from MONAI by {err}"
    g = lab[0, 0].numpy()
    r = r_lab[0].round().to(torch.int64).numpy()
    assert len(np.unique(r)) >= 3, f"{what}: the reference label has < 2 structures"
    n = label_ties(g, r, chain)
    assert n <= LABEL_TIES * g.size, f"{what}: {n} half-voxel ties of {g.size} voxels"
    return {"image_err": err, "ties": n, "shape": tuple(r_img.shape[1:])}


@pytest.mark.parametrize("pixdim", [(1.5, 1.5, 2.0), (3.0, 3.0, 3.0)])
def test_mricron_preprocessing_matches_monai(tmp_path, pixdim):
    # ch2 (uint8 T1, 1 mm RAS) with AAL merged into the trainer's 6 classes; a_min 0, a_max 255
    # (the trainer's mricron default).
    if not all((TEMPLATES / f).is_file() for f in ("ch2.nii.gz", "aal.nii.gz")):
        pytest.skip("mricron-data not installed (apt-get install mricron-data)")
    dump = tmp_path / "dump"
    r = run(["--device", "cpu", "--threads", "2", "--dataset", "mricron", "--roi", str(ROI),
             "--pixdim", ",".join(map(str, pixdim)), "--dump-preprocessed", str(dump)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "not training" in r.stdout and "step" not in r.stdout.split("not training")[-1], r.stdout
    assert sorted(p.name for p in dump.iterdir()) == ["ch2.pt"]  # validated on, written once
    dumped = torch.load(dump / "ch2.pt")
    assert dumped["raw_shape"].tolist() == [181, 217, 181]

    def merge(atlas):
        out = torch.zeros_like(atlas)
        for k, pair in enumerate(AAL, start=1):
            out[torch.isin(atlas, torch.tensor(pair, dtype=atlas.dtype))] = k
        return out

    ref = monai_chain(str(TEMPLATES / "ch2.nii.gz"), str(TEMPLATES / "aal.nii.gz"), pixdim, 0.0, 255.0, ROI,
                      label_map=merge, zero_residues=True)
    got = compare(dumped, ref, f"ch2 at {pixdim}")
    # Cropped (on some axes), not padded.
    assert all(r >= g > ROI for r, g in zip(ref["spaced_shape"], got["shape"]))
    assert ref["spaced_shape"] != got["shape"]
    assert ref["residues"] > 0  # the premise of the residue handling (observed: thousands)



def _rot(deg):
    """A homogeneous rotation: Rz @ Ry @ Rx of the (x, y, z) angles in degrees."""
    rx, ry, rz = np.deg2rad(deg)
    cx, sx, cy, sy, cz, sz = np.cos(rx), np.sin(rx), np.cos(ry), np.sin(ry), np.cos(rz), np.sin(rz)
    m = np.eye(4)
    m[:3, :3] = (np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]]) @ np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
                 @ np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]]))
    return m


@pytest.fixture(scope="module")
def msd_dump(tmp_path_factory):
    """write_msd's three subjects (i -> A, j -> -R, k -> S); case1 re-saved rotated (7, -4, 11
    degrees), case2 rotated by 25 degrees about S and sheared (0.15 of k into i); run through
    --dump-preprocessed."""
    nib = pytest.importorskip("nibabel")
    root = tmp_path_factory.mktemp("msd")
    write_msd(root)

    shear = np.eye(4)
    shear[0, 2] = 0.15
    changes = {"case1": _rot((7.0, -4.0, 11.0)), "case2": _rot((0.0, 0.0, 25.0)) @ shear}
    for name, m in changes.items():
        for sub in ("imagesTr", "labelsTr"):
            p = root / sub / f"{name}.nii.gz"
            v = nib.load(p)
            nib.save(nib.Nifti1Image(np.asarray(v.dataobj), m @ v.affine), p)
    dump = tmp_path_factory.mktemp("dump")
    r = run(["--device", "cpu", "--threads", "2", "--dataset", "msd", "--data-dir", str(root), "--roi", str(MSD_ROI),
             "--dump-preprocessed", str(dump)])
    assert r.returncode == 0, r.stdout + r.stderr
    return root, dump


@pytest.mark.parametrize("case", ["case0", "case1", "case2"])
def test_msd_preprocessing_matches_monai(msd_dump, case):
    # Default pixdim (1.5, 1.5, 2.0) and intensity window (-175, 250). The images are CT-like values
    # above a_min everywhere and Spacing pads with the border, so CropForeground keeps everything:
    # the orientation and the resampling geometry are what is compared here.
    nib = pytest.importorskip("nibabel")
    root, dump = msd_dump
    assert sorted(p.name for p in dump.iterdir()) == [f"case{i}.nii.gz.pt" for i in range(3)]
    dumped = torch.load(dump / f"{case}.nii.gz.pt")
    image, label = root / "imagesTr" / f"{case}.nii.gz", root / "labelsTr" / f"{case}.nii.gz"
    assert dumped["raw_shape"].tolist() == list(nib.load(image).shape)
    ref = monai_chain(str(image), str(label), (1.5, 1.5, 2.0), -175.0, 250.0, MSD_ROI)
    got = compare(dumped, ref, case)
    # Spacing's output is all foreground (CT-like values, border padding); the pad sets the shape.
    assert got["shape"] == (MSD_ROI,) * 3 and all(n < MSD_ROI for n in ref["spaced_shape"])
    if case == "case2":  # the premise: MONAI's grid for a sheared affine is not the axis-scaled one
        a = ref["oriented"]["image"].affine.numpy()
        shape = ref["oriented"]["image"].shape[1:]
        naive = tuple(int(np.round((n - 1) * np.linalg.norm(a[:3, i]) / p + 1))
                      for i, (n, p) in enumerate(zip(shape, (1.5, 1.5, 2.0))))
        assert ref["spaced_shape"] != naive, naive


def test_dump_preprocessed_bad_directory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    r = run(["--device", "cpu", "--dataset", "phantom", "--phantom-size", "32", "--phantom-train", "1",
             "--phantom-val", "1", "--roi", "32", "--dump-preprocessed", str(blocker)])
    assert r.returncode != 0 and "--dump-preprocessed" in r.stderr, r.stderr


# The transform codes of a NIfTI-1 header (nibabel's choice, Nifti1Header.get_best_affine: sform
# when sform_code != 0, else qform when qform_code != 0, else get_base_affine: diag(-dx, dy, dz)
# centred on the volume). Each MSD subject of write_msd is re-saved with one combination.
@pytest.fixture(scope="module")
def codes_dump(tmp_path_factory):
    """case0: neither transform (sform_code = qform_code = 0; both still hold write_msd's affine,
    which must be ignored); case1: qform only (rotated, k flipped: qfac -1); case2: sform only
    (rotated + sheared), the qform holding another affine under code 0; case3 (a copy of case0's
    data): both, sform and qform different (the sform wins). Returns (root, dump)."""
    nib = pytest.importorskip("nibabel")
    root = tmp_path_factory.mktemp("codes")
    write_msd(root)
    flip_k = np.diag([1.0, 1.0, -1.0, 1.0])
    shear = np.eye(4)
    shear[0, 2] = 0.15
    for sub in ("imagesTr", "labelsTr"):
        shutil.copy(root / sub / "case0.nii.gz", root / sub / "case3.nii.gz")
    for sub in ("imagesTr", "labelsTr"):
        for name in ("case0", "case1", "case2", "case3"):
            p = root / sub / f"{name}.nii.gz"
            v = nib.load(p)
            a = v.affine
            img = nib.Nifti1Image(np.asarray(v.dataobj), a)
            if name == "case0":
                img.set_sform(a, code=0)
                img.set_qform(a, code=0)
            elif name == "case1":
                img.set_sform(a, code=0)
                img.set_qform(_rot((7.0, -4.0, 11.0)) @ a @ flip_k, code=1)
            elif name == "case2":
                sform = _rot((0.0, 0.0, 25.0)) @ shear @ a
                img.set_qform(a, code=0)
                img.set_sform(sform, code=2)
                # pixdim = the sform's column norms, as nibabel writes a sheared affine: MONAI's
                # LoadImage would otherwise put the code-0 qform in place of a sform whose norms
                # disagree with pixdim (monai.data.utils.rectify_header_sform_qform), unlike nibabel.
                img.header.set_zooms(tuple(np.linalg.norm(sform[:3, :3], axis=0)))
            else:
                img.set_sform(_rot((0.0, 0.0, 25.0)) @ a, code=4)
                img.set_qform(a, code=1)
            nib.save(img, p)
    meta = json.loads((root / "dataset.json").read_text())
    meta["training"].append({"image": "./imagesTr/case3.nii.gz", "label": "./labelsTr/case3.nii.gz"})
    (root / "dataset.json").write_text(json.dumps(meta))
    dump = tmp_path_factory.mktemp("codes_dump")
    r = run(["--device", "cpu", "--threads", "2", "--dataset", "msd", "--data-dir", str(root), "--roi", str(MSD_ROI),
             "--dump-preprocessed", str(dump)])
    assert r.returncode == 0, r.stdout + r.stderr
    return root, dump


@pytest.mark.parametrize("case,codes", [("case0", (0, 0)), ("case1", (0, 1)), ("case2", (2, 0)), ("case3", (4, 1))])
def test_nifti_affine_codes_match_nibabel(codes_dump, case, codes):
    # The reader's affine (dumped as raw_affine) equals nibabel.load(f).affine within 1e-6 mm for
    # every combination of codes (nifticlib alone gives diag(dx, dy, dz) at the origin for case0,
    # off by the x flip and up to 30 mm here), and the whole preprocessing then matches MONAI's.
    nib = pytest.importorskip("nibabel")
    root, dump = codes_dump
    image = root / "imagesTr" / f"{case}.nii.gz"
    v = nib.load(image)
    hdr = v.header
    assert (int(hdr["sform_code"]), int(hdr["qform_code"])) == codes  # the premise
    if case == "case2":  # a qform stored under code 0 that differs from the sform
        assert np.abs(hdr.get_qform() - v.affine).max() > 1.0
    if case == "case3":  # the codes' transforms differ: the sform must win
        assert np.abs(hdr.get_qform() - hdr.get_sform()).max() > 1.0
    dumped = torch.load(dump / f"{case}.nii.gz.pt")
    assert dumped["raw_affine"].dtype == torch.float64
    np.testing.assert_allclose(dumped["raw_affine"].numpy(), v.affine, rtol=0, atol=1e-6, err_msg=case)
    if case == "case0":
        zooms = np.array(hdr.get_zooms()[:3], np.float64)
        shape = np.array(v.shape[:3])
        expect = np.diag([-zooms[0], zooms[1], zooms[2], 1.0])
        expect[:3, 3] = -(shape - 1) / 2 * expect.diagonal()[:3]
        np.testing.assert_allclose(v.affine, expect, rtol=0, atol=1e-12)  # nibabel's default, as documented
    ref = monai_chain(str(image), str(root / "labelsTr" / f"{case}.nii.gz"), (1.5, 1.5, 2.0), -175.0, 250.0, MSD_ROI)
    compare(dumped, ref, case)
