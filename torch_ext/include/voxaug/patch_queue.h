// voxaug::torch -- a patch queue on the device for LibTorch programs, with TorchIO Queue's
// semantics (torchio/data/queue.py) and no worker processes: the C++ twin of
// python/voxaug/crop.py's PatchQueue and its UniformSampler / WeightedSampler / LabelSampler.
//
// The subjects' volumes are cached once on the queue's device. Patch locations are drawn by the
// sampler on that device when the queue fills (voxaug::ops::uniform_crop_centers /
// weighted_crop_centers / class_crop_centers, blocks of up to 16), and the queue holds only those
// locations: a batch is cut from the cached volumes when it is taken, one
// voxaug::ops::gather_patches call per tensor name for the whole batch whatever subjects it
// mixes (a queue of max_length patches holds no patch tensors; a cached volume changed in place
// between fill and take shows in later patches). Nothing is copied to the host except what the
// Python samplers also read: with `check` on, the weighted sampler's map statistics and the label
// sampler's class counts, once per subject visit, to raise TorchIO's errors (a host sync on CUDA).
//
// Randomness: one CPU generator (seeded by PatchQueueOptions::seed, else torch's default CPU
// generator) gives the subject permutation of each pass, the patch permutation of each fill and
// one 64-bit seed per subject visit; the centres are Philox draws keyed by that seed, so a seeded
// queue yields the same locations on the CPU and on CUDA.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace voxaug {

// One subject: named volumes (C, D, H, W) or (1, C, D, H, W), all of one spatial shape (image,
// label, probability map, ... of any dtype, bool included). num_samples > 0 overrides the
// queue's samples_per_volume for this subject (TorchIO's NUM_SAMPLES); 0 takes the queue's.
struct Subject {
  std::map<std::string, at::Tensor> tensors;
  int64_t num_samples = 0;
};

// How patch centres are drawn, TorchIO's samplers (every patch lies inside the volume; the
// centre, start + patch // 2, is drawn in TorchIO's valid region
// [patch // 2, size - (patch - 1) // 2) per axis).
struct PatchSampler {
  enum class Kind { Uniform, Weighted, Label };

  // TorchIO UniformSampler: the patch start uniform in [0, size - patch] per axis.
  static PatchSampler uniform(std::array<int64_t, 3> patch_size);
  // TorchIO WeightedSampler: the centre drawn with probability proportional to channel 0 of the
  // subject's `probability_map` tensor (negative values count as 0). check: raise TorchIO's
  // errors for a negative map (c10::ValueError) or an empty valid region (c10::Error); false
  // skips the host read and an empty map then draws uniformly.
  static PatchSampler weighted(std::array<int64_t, 3> patch_size, std::string probability_map,
                               bool check = true);
  // TorchIO LabelSampler on the subject's `label_name` tensor. label_probabilities empty: the
  // centre uniform among the voxels where channel 0 > 0. Else {label: probability}: a label drawn
  // with probability proportional to its value among the labels present in the valid region,
  // then one of its voxels uniformly; a multi-channel label's keys are channels (a voxel is of
  // channel c where that channel is != 0). check: raise TorchIO's RuntimeError (c10::Error) when
  // no labelled voxel with a positive probability is in the valid region; false draws a present
  // label then.
  static PatchSampler label(std::array<int64_t, 3> patch_size, std::string label_name = "label",
                            std::map<int64_t, double> label_probabilities = {}, bool check = true);

  Kind kind = Kind::Uniform;
  std::array<int64_t, 3> patch_size{1, 1, 1};
  std::string tensor_name;  // Weighted: the probability map; Label: the label
  std::map<int64_t, double> label_probabilities;
  bool check = true;
};

// One patch as TorchIO's queue[i] returns it: every tensor of the subject cut to
// (1, C, *patch_size), and location (1, 6) int64 = (i0, j0, k0, i1, j1, k1), half-open voxel
// indices of the patch in the volume (TorchIO's LOCATION).
struct Patch {
  std::map<std::string, at::Tensor> tensors;
  at::Tensor location;
  int64_t subject = 0;  // index of the subject in the queue's `subjects`
};

// Patches concatenated along dim 0: tensors (B, C, *patch_size), location (B, 6) int64, both on
// the queue's device; subjects (B) the subject index of each patch.
struct Batch {
  std::map<std::string, at::Tensor> tensors;
  at::Tensor location;
  std::vector<int64_t> subjects;
};

struct PatchQueueOptions {
  int64_t batch_size = 1;
  bool shuffle_subjects = true;  // a new random subject order for every pass over the subjects
  bool shuffle_patches = true;   // shuffle the queue after every fill
  bool drop_last = false;        // drop an epoch's last batch when it is smaller than batch_size
  std::optional<uint64_t> seed;  // the queue's own CPU generator; none: torch's default one
  std::optional<c10::Device> device;  // where the volumes are cached; none: where they are
  // Runs on every batch the queue yields (e.g. voxaug::ops augmentations on batch.tensors).
  std::function<void(Batch&)> transform;
};

class PatchQueue {
 public:
  // Errors (c10::ValueError) name the argument: max_length, samples_per_volume or batch_size
  // < 1, no subjects, a subject without tensors or with a tensor that is not (C, D, H, W) /
  // (1, C, D, H, W), tensors of different spatial shapes, a negative num_samples, a patch larger
  // than a volume, the sampler's tensor missing from a subject, bad label probabilities.
  PatchQueue(std::vector<Subject> subjects, int64_t max_length, int64_t samples_per_volume,
             PatchSampler sampler, PatchQueueOptions options = {});

  // TorchIO's iterations_per_epoch: the sum of the subjects' num_samples.
  int64_t size() const;
  // Batches in one epoch: size() / batch_size, rounded up unless drop_last.
  int64_t batches_per_epoch() const;
  // Patches held now (TorchIO's len(queue.patches_list)).
  int64_t num_patches() const { return static_cast<int64_t>(entries_.size()); }
  int64_t max_length() const { return max_length_; }
  const std::vector<Subject>& subjects() const { return subjects_; }

  // One patch, TorchIO's queue[i]: fills the queue first when it is empty.
  Patch pop();
  // `count` patches popped and cut as one batch, then options.transform applied.
  Batch take(int64_t count);

  // One epoch: size() patches in batches of batch_size (the last one smaller unless drop_last).
  // The queue keeps its patches between epochs, as TorchIO's does. Input iterator: each
  // increment pops the next batch.
  struct Epoch;
  class EpochIterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = const Batch*;
    using reference = const Batch&;

    EpochIterator() = default;  // the end
    const Batch& operator*() const { return batch_; }
    const Batch* operator->() const { return &batch_; }
    EpochIterator& operator++();
    bool operator==(const EpochIterator& o) const {
      return queue_ == o.queue_ && (queue_ == nullptr || left_ == o.left_);
    }
    bool operator!=(const EpochIterator& o) const { return !(*this == o); }

   private:
    friend class PatchQueue;
    friend struct Epoch;
    EpochIterator(PatchQueue* queue, int64_t patches);
    PatchQueue* queue_ = nullptr;
    int64_t left_ = 0;  // patches of the epoch not yet taken
    Batch batch_;
  };
  struct Epoch {
    PatchQueue* queue;
    EpochIterator begin() const { return EpochIterator(queue, queue->size()); }
    EpochIterator end() const { return {}; }
  };
  Epoch epoch() { return Epoch{this}; }

 private:
  int64_t num_samples(const Subject& s) const;
  void new_pass();
  std::size_t next_subject();
  // A queued patch: its subject and TorchIO location (1, 6), cut when taken.
  struct Entry {
    std::size_t subject;
    at::Tensor location;
  };
  void sample(std::size_t subject, int64_t n);
  void fill();
  Entry pop_entry();
  Batch cut(const std::vector<Entry>& entries) const;

  std::vector<Subject> subjects_;
  int64_t max_length_;
  int64_t samples_per_volume_;
  PatchSampler sampler_;
  PatchQueueOptions options_;
  at::Generator generator_;
  std::vector<Entry> entries_;  // in reverse pop order
  std::optional<std::size_t> incomplete_;
  int64_t num_incomplete_ = 0;
  std::vector<int64_t> order_;
  std::size_t pos_ = 0;
  std::size_t num_sampled_ = 0;
};

}  // namespace voxaug
