// voxaug::PatchQueue (voxaug/patch_queue.h) against independent references: the queue's length,
// fill order and epoch batch counts against TorchIO Queue's rules re-derived here in a few
// lines (shuffles off, so the order is deterministic); every patch against torch's own slicing
// of the volume at the patch's location (image, label and a bool mask); the samplers' draws
// against the frequencies their label probabilities / weights imply (chi-square, fixed seeds,
// threshold at p = 1e-3 as the Python sampler tests); the CUDA queue against the CPU queue with
// the same seed (the centres are Philox draws keyed by the same seeds).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "voxaug/patch_queue.h"

namespace {

using torch::indexing::Slice;
using voxaug::Batch;
using voxaug::PatchQueue;
using voxaug::PatchQueueOptions;
using voxaug::PatchSampler;
using voxaug::Subject;

// TorchIO Queue's patch order with shuffle_subjects = shuffle_patches = False
// (torchio/data/queue.py, _fill and _get_next_subject): subjects in order, each contributing
// min(num_samples, free slots) patches; the part of a subject that did not fit comes first at the
// next fill; a fill stops when max_length patches are held or every subject of the current pass
// was visited. (Checked once against torchio.Queue 1.2.1 itself for max_length 7..100. Where a
// carried remainder exceeds max_length, TorchIO's islice gets a negative count and raises;
// voxaug, like python/voxaug's PatchQueue, takes 0 free slots then, as here.) Returns the subject
// index of each of the first `pops` popped patches and the number of patches held after each pop.
struct NaiveOrder {
  std::vector<int64_t> subject;
  std::vector<int64_t> held_after;
};
NaiveOrder naive_torchio_order(const std::vector<int64_t>& num_samples, int64_t max_length,
                               int64_t pops) {
  NaiveOrder out;
  std::vector<int64_t> held;  // front = next to pop
  int64_t carried_subject = -1, carried = 0;
  int64_t next = static_cast<int64_t>(num_samples.size());  // forces a new pass at the first fill
  int64_t visited = 0;
  auto fill = [&] {
    if (carried_subject >= 0) held.insert(held.end(), carried, carried_subject);
    carried_subject = -1;
    for (;;) {
      if (next == static_cast<int64_t>(num_samples.size())) {
        next = 0;
        visited = 0;
      }
      const int64_t s = next++;
      const int64_t free = std::max<int64_t>(0, max_length - static_cast<int64_t>(held.size()));
      const int64_t take = std::min(num_samples[s], free);
      if (take < num_samples[s]) {
        carried_subject = s;
        carried = num_samples[s] - take;
      }
      held.insert(held.end(), take, s);
      ++visited;
      if (static_cast<int64_t>(held.size()) >= max_length ||
          visited >= static_cast<int64_t>(num_samples.size()))
        break;
    }
  };
  for (int64_t i = 0; i < pops; ++i) {
    if (held.empty()) fill();
    out.subject.push_back(held.front());
    held.erase(held.begin());
    out.held_after.push_back(static_cast<int64_t>(held.size()));
  }
  return out;
}

// A subject of spatial shape `shape`: a float32 image (2 channels), an int64 label in [0, 4),
// a bool mask, and "id" filled with `id` (which subject a patch came from, read from its pixels).
Subject make_subject(const std::vector<int64_t>& shape, int64_t id, int64_t num_samples = 0) {
  Subject s;
  s.tensors["image"] = torch::randn({2, shape[0], shape[1], shape[2]});
  s.tensors["label"] = torch::randint(0, 4, {1, 1, shape[0], shape[1], shape[2]}, torch::kLong);
  s.tensors["mask"] = torch::rand({1, shape[0], shape[1], shape[2]}) > 0.5;
  s.tensors["id"] = torch::full({1, shape[0], shape[1], shape[2]}, static_cast<double>(id));
  s.num_samples = num_samples;
  return s;
}

// The subject a patch came from, from its "id" pixels (all equal).
int64_t patch_id(const torch::Tensor& id_patch) {
  const double lo = id_patch.min().item<double>(), hi = id_patch.max().item<double>();
  EXPECT_EQ(lo, hi) << "an id patch mixes subjects";
  return static_cast<int64_t>(lo);
}

// The volume x (1, C, D, H, W) sliced at location (i0, j0, k0, i1, j1, k1).
torch::Tensor slice_at(const torch::Tensor& x, const torch::Tensor& loc) {
  const torch::Tensor l = loc.cpu();
  const torch::Tensor v = x.dim() == 5 ? x[0] : x;
  return v.index({Slice(), Slice(l[0].item<int64_t>(), l[3].item<int64_t>()),
                  Slice(l[1].item<int64_t>(), l[4].item<int64_t>()),
                  Slice(l[2].item<int64_t>(), l[5].item<int64_t>())});
}

// Calls fn, expects a c10::Error whose message contains every one of `parts`.
template <class F>
void expect_error(F&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning '" << parts.front() << "'";
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

// Chi-square statistic of observed counts against probabilities (summing to 1).
double chi_square(const std::vector<int64_t>& observed, const std::vector<double>& probs) {
  int64_t total = 0;
  for (int64_t o : observed) total += o;
  double chi = 0.0;
  for (std::size_t i = 0; i < observed.size(); ++i) {
    const double e = probs[i] * static_cast<double>(total);
    chi += (static_cast<double>(observed[i]) - e) * (static_cast<double>(observed[i]) - e) / e;
  }
  return chi;
}

PatchQueueOptions ordered(int64_t batch_size = 1, bool drop_last = false) {
  PatchQueueOptions o;
  o.batch_size = batch_size;
  o.shuffle_subjects = false;
  o.shuffle_patches = false;
  o.drop_last = drop_last;
  o.seed = 7;
  return o;
}

TEST(PatchQueue, FillOrderAndLengthFollowTorchIO) {
  torch::manual_seed(0);
  const std::vector<int64_t> shape{6, 7, 5};
  // num_samples 0 takes samples_per_volume (4); max_length 5 splits subjects across fills.
  const std::vector<int64_t> overrides{0, 7, 2, 0, 1};
  for (int64_t max_length : {1, 3, 5, 8, 100}) {
    std::vector<Subject> subjects;
    std::vector<int64_t> nums;
    for (std::size_t i = 0; i < overrides.size(); ++i) {
      subjects.push_back(make_subject(shape, static_cast<int64_t>(i), overrides[i]));
      nums.push_back(overrides[i] > 0 ? overrides[i] : 4);
    }
    PatchQueue q(subjects, max_length, 4, PatchSampler::uniform({3, 2, 3}), ordered());
    int64_t total = 0;
    for (int64_t n : nums) total += n;
    EXPECT_EQ(q.size(), total);
    const int64_t pops = 3 * total + 2;  // three epochs and a bit: passes restart, carries cross
    const NaiveOrder want = naive_torchio_order(nums, max_length, pops);
    for (int64_t i = 0; i < pops; ++i) {
      const voxaug::Patch p = q.pop();
      ASSERT_EQ(patch_id(p.tensors.at("id")), want.subject[i])
          << "max_length " << max_length << ", pop " << i;
      EXPECT_EQ(p.subject, want.subject[i]);
      ASSERT_EQ(q.num_patches(), want.held_after[i])
          << "max_length " << max_length << ", pop " << i;
      ASSERT_LE(q.num_patches(), std::max<int64_t>(max_length, 7));
    }
  }
}

TEST(PatchQueue, EpochBatchCounts) {
  torch::manual_seed(1);
  const std::vector<int64_t> nums{3, 5, 2};  // 10 patches per epoch
  std::vector<Subject> subjects;
  for (std::size_t i = 0; i < nums.size(); ++i)
    subjects.push_back(make_subject({5, 5, 6}, static_cast<int64_t>(i), nums[i]));
  for (int64_t bs : {1, 3, 4, 10, 11})
    for (bool drop_last : {false, true}) {
      PatchQueue q(subjects, 4, 1, PatchSampler::uniform({2, 3, 1}), ordered(bs, drop_last));
      // Independent count: full batches, plus the remainder unless dropped.
      const int64_t full = 10 / bs, rest = 10 % bs;
      const int64_t want_batches = full + (rest > 0 && !drop_last ? 1 : 0);
      EXPECT_EQ(q.batches_per_epoch(), want_batches);
      const NaiveOrder order = naive_torchio_order(nums, 4, 2 * 10);
      int64_t popped = 0;
      for (int epoch = 0; epoch < 2; ++epoch) {
        int64_t batches = 0, patches = 0;
        for (const Batch& b : q.epoch()) {
          const int64_t want = batches < full ? bs : rest;
          ASSERT_EQ(b.location.size(0), want);
          ASSERT_EQ(b.tensors.at("image").sizes(), torch::IntArrayRef({want, 2, 2, 3, 1}));
          ASSERT_EQ(b.tensors.at("label").sizes(), torch::IntArrayRef({want, 1, 2, 3, 1}));
          ASSERT_EQ(b.tensors.at("mask").scalar_type(), torch::kBool);
          for (int64_t i = 0; i < want; ++i)
            EXPECT_EQ(patch_id(b.tensors.at("id")[i]), order.subject[popped + i]);
          popped += want;
          patches += want;
          ++batches;
        }
        EXPECT_EQ(batches, want_batches) << "bs " << bs << " drop_last " << drop_last;
        EXPECT_EQ(patches, drop_last ? full * bs : 10);
        // A dropped remainder stays in the queue (not popped), as in TorchIO with drop_last.
      }
    }
}

TEST(PatchQueue, ShuffledEpochVisitsEachSubjectItsNumSamplesAndIsSeeded) {
  torch::manual_seed(2);
  const std::vector<int64_t> nums{3, 6, 1, 4};
  std::vector<Subject> subjects;
  for (std::size_t i = 0; i < nums.size(); ++i)
    subjects.push_back(make_subject({7, 6, 5}, static_cast<int64_t>(i), nums[i]));
  auto run = [&](uint64_t seed) {
    PatchQueueOptions o;
    o.batch_size = 3;
    o.seed = seed;
    PatchQueue q(subjects, 14, 1, PatchSampler::uniform({3, 3, 3}), o);  // max_length = size
    std::vector<int64_t> per_subject(nums.size(), 0);
    std::vector<torch::Tensor> locs;
    for (const Batch& b : q.epoch()) {
      for (int64_t i = 0; i < b.location.size(0); ++i)
        ++per_subject[patch_id(b.tensors.at("id")[i])];
      locs.push_back(b.location);
    }
    EXPECT_EQ(per_subject, nums);
    return torch::cat(locs);
  };
  const torch::Tensor a = run(11), b = run(11), c = run(12);
  EXPECT_TRUE(torch::equal(a, b)) << "the same seed must give the same patches";
  EXPECT_FALSE(torch::equal(a, c)) << "another seed gave the same 14 locations";
}

// Every patch equals the volume sliced at its location, for every tensor of the subject; the
// subjects differ in size, one image is d-fastest (nibabel's layout), and batches mix subjects.
void check_patches_line_up(torch::Device device) {
  torch::manual_seed(3);
  std::vector<Subject> subjects;
  for (int64_t i = 0; i < 3; ++i) {
    const std::vector<int64_t> shape{9 + i, 8, 7 + 2 * i};
    Subject s = make_subject(shape, i, 5 + i);
    s.tensors["weights"] = torch::rand({1, shape[0], shape[1], shape[2]}) *
                           (torch::rand({1, shape[0], shape[1], shape[2]}) > 0.6);
    if (i == 1)
      s.tensors["image"] =
          s.tensors["image"].permute({0, 3, 2, 1}).contiguous().permute({0, 3, 2, 1});
    subjects.push_back(s);
  }
  const std::array<int64_t, 3> p{3, 4, 2};
  const std::vector<PatchSampler> samplers{
      PatchSampler::uniform(p), PatchSampler::weighted(p, "weights"),
      PatchSampler::label(p, "label"), PatchSampler::label(p, "label", {{1, 1.0}, {3, 2.0}})};
  for (std::size_t k = 0; k < samplers.size(); ++k) {
    PatchQueueOptions o;
    o.batch_size = 4;
    o.seed = 5;
    o.device = device;
    PatchQueue q(subjects, 6, 2, samplers[k], o);
    int64_t n = 0, mixed = 0;
    for (const Batch& b : q.epoch()) {
      mixed += std::set<int64_t>(b.subjects.begin(), b.subjects.end()).size() > 1;
      for (const auto& [name, t] : b.tensors)  // an index-less CUDA device: the current one
        EXPECT_TRUE(t.device().type() == device.type() &&
                    (!device.has_index() || t.device().index() == device.index()))
            << name << " is on " << t.device() << ", asked for " << device;
      for (int64_t i = 0; i < b.location.size(0); ++i, ++n) {
        const torch::Tensor loc = b.location[i].cpu();
        const Subject& s = subjects[b.subjects[i]];
        for (int a = 0; a < 3; ++a) {
          EXPECT_GE(loc[a].item<int64_t>(), 0);
          EXPECT_EQ(loc[a + 3].item<int64_t>() - loc[a].item<int64_t>(), p[a]);
          EXPECT_LE(loc[a + 3].item<int64_t>(), s.tensors.at("label").size(a + 2));
        }
        for (const auto& [name, vol] : s.tensors)
          ASSERT_TRUE(torch::equal(b.tensors.at(name)[i].cpu(), slice_at(vol, loc)))
              << "sampler " << k << ", tensor " << name << ", patch " << n;
        // The centre (start + patch // 2) satisfies the sampler.
        const int64_t cd = loc[0].item<int64_t>() + p[0] / 2,
                      ch = loc[1].item<int64_t>() + p[1] / 2,
                      cw = loc[2].item<int64_t>() + p[2] / 2;
        const int64_t lab = s.tensors.at("label")[0][0][cd][ch][cw].item<int64_t>();
        if (k == 1) {
          EXPECT_GT(s.tensors.at("weights")[0][cd][ch][cw].item<float>(), 0.0f);
        } else if (k == 2) {
          EXPECT_GT(lab, 0);
        } else if (k == 3) {
          EXPECT_TRUE(lab == 1 || lab == 3) << lab;
        }
      }
    }
    EXPECT_EQ(n, 18);
    EXPECT_GE(mixed, 1) << "no batch mixed subjects (sampler " << k << ")";
  }
}

TEST(PatchQueue, PatchesLineUpWithTheirLocations) {
  check_patches_line_up(torch::kCPU);
}

TEST(PatchQueue, LabelSamplerClassFrequenciesFollowTheProbabilities) {
  torch::manual_seed(4);
  // Labels 0..3 everywhere; 2 has no probability, so it is never a centre.
  Subject s;
  s.tensors["label"] = torch::randint(0, 4, {1, 12, 11, 10}, torch::kInt);
  s.tensors["image"] = torch::randn({1, 12, 11, 10});
  const std::map<int64_t, double> probs{{0, 0.1}, {1, 0.2}, {3, 0.7}};
  const std::array<int64_t, 3> p{3, 3, 4};
  PatchQueueOptions o;
  o.batch_size = 500;
  o.seed = 9;
  PatchQueue q({s}, 1000, 3000, PatchSampler::label(p, "label", probs), o);
  std::vector<int64_t> counts(4, 0);
  for (const Batch& b : q.epoch()) {
    const torch::Tensor c = b.location.index({Slice(), Slice(0, 3)}) +
                            torch::tensor({p[0] / 2, p[1] / 2, p[2] / 2}, torch::kLong);
    const torch::Tensor lab =
        s.tensors["label"][0].index({c.select(1, 0), c.select(1, 1), c.select(1, 2)});
    for (int64_t v = 0; v < 4; ++v) counts[v] += (lab == v).sum().item<int64_t>();
  }
  EXPECT_EQ(counts[0] + counts[1] + counts[2] + counts[3], 3000);
  EXPECT_EQ(counts[2], 0);
  // df = 2: P(chi2 > 13.82) = 1e-3.
  EXPECT_LT(chi_square({counts[0], counts[1], counts[3]}, {0.1, 0.2, 0.7}), 13.82)
      << counts[0] << " " << counts[1] << " " << counts[3];
}

TEST(PatchQueue, OneHotLabelProbabilitiesAreChannels) {
  torch::manual_seed(5);
  const torch::Tensor argmax = torch::randint(0, 3, {10, 9, 8}, torch::kLong);
  Subject s;
  s.tensors["seg"] = torch::one_hot(argmax, 3).permute({3, 0, 1, 2}).to(torch::kFloat);
  PatchQueueOptions o;
  o.batch_size = 400;
  o.seed = 3;
  const std::array<int64_t, 3> p{1, 2, 3};
  PatchQueue q({s}, 2000, 2000, PatchSampler::label(p, "seg", {{0, 1.0}, {2, 3.0}}), o);
  std::vector<int64_t> counts(3, 0);
  for (const Batch& b : q.epoch()) {
    const torch::Tensor c = b.location.index({Slice(), Slice(0, 3)}) +
                            torch::tensor({p[0] / 2, p[1] / 2, p[2] / 2}, torch::kLong);
    const torch::Tensor cls = argmax.index({c.select(1, 0), c.select(1, 1), c.select(1, 2)});
    for (int64_t v = 0; v < 3; ++v) counts[v] += (cls == v).sum().item<int64_t>();
  }
  EXPECT_EQ(counts[1], 0);
  EXPECT_LT(chi_square({counts[0], counts[2]}, {0.25, 0.75}), 10.83);  // df = 1, p = 1e-3
}

TEST(PatchQueue, WeightedSamplerCentresOnPositiveWeightsOnly) {
  // Four positive voxels with weights 1..4 inside the valid region; everything else 0.
  const std::array<int64_t, 3> p{3, 2, 5};
  torch::Tensor w = torch::zeros({1, 8, 9, 10});
  const std::vector<std::array<int64_t, 3>> where{{1, 1, 2}, {4, 5, 6}, {6, 8, 7}, {3, 2, 4}};
  for (std::size_t i = 0; i < where.size(); ++i)
    w[0][where[i][0]][where[i][1]][where[i][2]] = static_cast<double>(i + 1);
  Subject s;
  s.tensors["w"] = w;
  s.tensors["image"] = torch::randn({1, 8, 9, 10});
  PatchQueueOptions o;
  o.batch_size = 250;
  o.seed = 1;
  PatchQueue q({s}, 500, 2000, PatchSampler::weighted(p, "w"), o);
  std::vector<int64_t> counts(4, 0);
  int64_t total = 0;
  for (const Batch& b : q.epoch()) {
    const torch::Tensor c = (b.location.index({Slice(), Slice(0, 3)}) +
                             torch::tensor({p[0] / 2, p[1] / 2, p[2] / 2}, torch::kLong));
    auto a = c.accessor<int64_t, 2>();
    for (int64_t i = 0; i < c.size(0); ++i, ++total) {
      const std::array<int64_t, 3> c3{a[i][0], a[i][1], a[i][2]};
      const auto it = std::find(where.begin(), where.end(), c3);
      ASSERT_NE(it, where.end()) << "centre " << c3[0] << "," << c3[1] << "," << c3[2]
                                 << " has weight 0";
      ++counts[it - where.begin()];
    }
  }
  EXPECT_EQ(total, 2000);
  EXPECT_LT(chi_square(counts, {0.1, 0.2, 0.3, 0.4}), 16.27);  // df = 3, p = 1e-3
}

TEST(PatchQueue, TransformRunsOnEveryBatch) {
  torch::manual_seed(6);
  std::vector<Subject> subjects{make_subject({6, 6, 6}, 0, 5), make_subject({6, 6, 6}, 1, 4)};
  int calls = 0;
  PatchQueueOptions o = ordered(4);
  o.transform = [&calls](Batch& b) {
    ++calls;
    b.tensors["image"] = b.tensors["image"] * 2 + 1;
    b.tensors["rows"] = torch::full({b.location.size(0)}, calls);
  };
  PatchQueue q(subjects, 3, 1, PatchSampler::uniform({2, 2, 2}), o);
  int64_t seen = 0;
  for (const Batch& b : q.epoch()) {
    ++seen;
    EXPECT_EQ(b.tensors.at("rows")[0].item<int64_t>(), seen);
    for (int64_t i = 0; i < b.location.size(0); ++i) {
      const torch::Tensor raw = slice_at(subjects[b.subjects[i]].tensors["image"], b.location[i]);
      EXPECT_TRUE(torch::allclose(b.tensors.at("image")[i], raw * 2 + 1));
      EXPECT_TRUE(torch::equal(b.tensors.at("label")[i],
                               slice_at(subjects[b.subjects[i]].tensors["label"], b.location[i])));
    }
  }
  EXPECT_EQ(calls, 3);  // 9 patches in batches of 4
  EXPECT_EQ(seen, q.batches_per_epoch());
}

TEST(PatchQueue, BadArgumentsGiveClearErrors) {
  const auto u = PatchSampler::uniform({2, 2, 2});
  std::vector<Subject> ok{make_subject({4, 5, 6}, 0)};
  expect_error([&] { PatchQueue(ok, 0, 1, u); }, {"max_length", "positive", "0"});
  expect_error([&] { PatchQueue(ok, 4, -2, u); }, {"samples_per_volume", "-2"});
  PatchQueueOptions bad_bs;
  bad_bs.batch_size = 0;
  expect_error([&] { PatchQueue(ok, 4, 1, u, bad_bs); }, {"batch_size"});
  expect_error([&] { PatchQueue({}, 4, 1, u); }, {"subjects must not be empty"});
  expect_error([&] { PatchQueue({Subject{}}, 4, 1, u); }, {"subject 0", "no tensor"});
  Subject flat;
  flat.tensors["image"] = torch::zeros({4, 5, 6});
  expect_error([&] { PatchQueue({flat}, 4, 1, u); }, {"'image'", "(C, D, H, W)", "[4, 5, 6]"});
  Subject batched;
  batched.tensors["image"] = torch::zeros({2, 1, 4, 5, 6});
  expect_error([&] { PatchQueue({batched}, 4, 1, u); }, {"'image'", "[2, 1, 4, 5, 6]"});
  Subject mixed = make_subject({4, 5, 6}, 0);
  mixed.tensors["other"] = torch::zeros({1, 4, 5, 7});
  expect_error([&] { PatchQueue({mixed}, 4, 1, u); }, {"spatial shape", "[4, 5, 7]"});
  Subject negative = make_subject({4, 5, 6}, 0, -1);
  expect_error([&] { PatchQueue({negative}, 4, 1, u); }, {"num_samples", "-1"});
  expect_error(
      [&] {
        PatchQueue(ok, 4, 1, PatchSampler::uniform({5, 2, 2}));
      },
      {"patch size [5, 2, 2]", "larger than image size [4, 5, 6]"});
  expect_error([&] { PatchSampler::uniform({2, 0, 2}); }, {"patch_size", "positive"});
  expect_error(
      [&] {
        PatchQueue(ok, 4, 1, PatchSampler::label({2, 2, 2}, "seg"));
      },
      {"'seg'", "not in the subject"});
  expect_error(
      [&] {
        PatchQueue(ok, 4, 1, PatchSampler::weighted({2, 2, 2}, "prob"));
      },
      {"'prob'", "not in the subject"});
  expect_error(
      [&] {
        PatchSampler::label({2, 2, 2}, "label", {{1, -0.5}});
      },
      {"label_probabilities", ">= 0", "-0.5"});
  expect_error(
      [&] {
        PatchSampler::label({2, 2, 2}, "label", {{-1, 1.0}});
      },
      {"label_probabilities keys", "-1"});
  expect_error([&] { PatchSampler::label({2, 2, 2}, "label", {{1, 0.0}}); }, {"all be 0"});
  Subject onehot;
  onehot.tensors["label"] = torch::zeros({3, 4, 5, 6});
  expect_error(
      [&] {
        PatchQueue({onehot}, 4, 1, PatchSampler::label({2, 2, 2}, "label", {{3, 1.0}}));
      },
      {"key 3", "3-channel label"});
  // TorchIO's sampling-time errors: a negative map, an empty valid region.
  Subject neg = make_subject({4, 5, 6}, 0);
  neg.tensors["w"] = torch::ones({1, 4, 5, 6});
  neg.tensors["w"][0][1][1][1] = -1.0;
  PatchQueue qn({neg}, 4, 1, PatchSampler::weighted({2, 2, 2}, "w"));
  EXPECT_THROW(qn.pop(), c10::ValueError);
  expect_error([&] { qn.pop(); }, {"Negative values", "\"w\""});
  Subject empty = make_subject({4, 5, 6}, 0);
  empty.tensors["w"] = torch::zeros({1, 4, 5, 6});
  empty.tensors["w"][0][0][0][0] = 1.0;  // only outside the valid region of a 3x3x3 patch
  PatchQueue qe({empty}, 4, 1, PatchSampler::weighted({3, 3, 3}, "w"));
  expect_error([&] { qe.pop(); }, {"Empty probability map", "[1, 1, 1]"});
  Subject nolabel = make_subject({4, 5, 6}, 0);
  nolabel.tensors["label"] = torch::zeros({1, 4, 5, 6}, torch::kLong);
  PatchQueue ql({nolabel}, 4, 1, PatchSampler::label({2, 2, 2}));
  expect_error([&] { ql.pop(); }, {"Empty probability map", "no labelled voxel"});
  // check = false: no host read, the draw goes ahead (uniform in the valid region).
  PatchQueue qe2({empty}, 4, 1, PatchSampler::weighted({3, 3, 3}, "w", false));
  EXPECT_EQ(qe2.pop().tensors.at("w").sizes(), torch::IntArrayRef({1, 1, 3, 3, 3}));
  expect_error([&] { PatchQueue(ok, 4, 1, u).take(0); }, {"count", "positive"});
}

TEST(PatchQueueCuda, PatchesLineUpWithTheirLocations) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the CUDA queue is not run";
  check_patches_line_up(torch::kCUDA);
}

TEST(PatchQueueCuda, MatchesTheCpuQueueWithTheSameSeed) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the CUDA queue is not run";
  torch::manual_seed(8);
  std::vector<Subject> subjects;
  for (int64_t i = 0; i < 3; ++i) {
    subjects.push_back(make_subject({11, 9, 10}, i, 20 + i));
    subjects.back().tensors["weights"] = torch::rand({1, 11, 9, 10});
  }
  const std::array<int64_t, 3> p{4, 3, 5};
  for (const PatchSampler& sampler :
       {PatchSampler::uniform(p), PatchSampler::label(p, "label", {{0, 1.0}, {2, 4.0}}),
        PatchSampler::weighted(p, "weights")}) {
    Batch got[2];
    for (int d = 0; d < 2; ++d) {
      PatchQueueOptions o;
      o.batch_size = 63;
      o.seed = 21;
      o.device = d == 0 ? torch::Device(torch::kCPU) : torch::Device(torch::kCUDA);
      PatchQueue q(subjects, 25, 1, sampler, o);
      got[d] = q.take(63);
    }
    EXPECT_TRUE(torch::equal(got[0].location, got[1].location.cpu()));
    EXPECT_EQ(got[0].subjects, got[1].subjects);
    for (const auto& [name, t] : got[0].tensors)
      EXPECT_TRUE(torch::equal(t, got[1].tensors.at(name).cpu())) << name;
  }
}

}  // namespace
