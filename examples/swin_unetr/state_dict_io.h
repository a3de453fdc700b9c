// State-dict checkpoints in torch.save's zip format, read and written without Python.
//
// LibTorch's own unpickler (torch::pickle_load) cannot build the collections.OrderedDict that
// `torch.save(model.state_dict(), path)` writes, so a MONAI checkpoint had to be re-saved as a
// plain dict. read_state_dict reads the zip archive with caffe2's PyTorchStreamReader and
// data.pkl with a small pickle reader of its own that covers what torch.save writes for tensors in
// (Ordered)dicts: pickle protocol 2 with the globals collections.OrderedDict,
// torch._utils._rebuild_tensor_v2 and torch.<Type>Storage, persistent-id storages, memo
// references and plain Python values (None, bools, ints, floats, strings, tuples, lists, dicts).
// Anything else (another global, another opcode, the legacy non-zip format) is refused with an
// error naming the file and what could not be read; nothing is executed.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>

namespace voxaug::train {

// The tensors of a state-dict checkpoint at `path`, on the CPU, with the dtypes, sizes, strides
// and storage offsets they were saved with; entries that shared a storage in the file share one
// here too (as with torch.load). The pickled object must be a dict {name: tensor} (plain or
// OrderedDict), or hold one under "state_dict", "model", "network" or "net" (one or two levels
// down: {"state_dict": sd, "epoch": 3}; {"network": sd, "optimizer": opt.state_dict()} as MONAI's
// CheckpointSaver writes); other entries of such wrappers may be any of the values listed above.
// Throws std::runtime_error naming `path` on any failure.
std::map<std::string, at::Tensor> read_state_dict(const std::string& path);

// torch.nn.DataParallel and DistributedDataParallel hold the model as their attribute `module`,
// so torch.save(wrapped.state_dict()) names every tensor "module.<name>". When every key of
// `tensors` starts with "module." and no key of `model` (the state dict to load into) does, the
// prefix is removed from every key (torch.nn.modules.utils.consume_prefix_in_state_dict_if_present
// does this in Python) and the number of keys renamed is returned; otherwise nothing changes and
// 0 is returned (a partly prefixed dict is left for the strict load to report).
size_t strip_data_parallel_prefix(std::map<std::string, at::Tensor>& tensors,
                                  const std::map<std::string, at::Tensor>& model);

// Writes {name: tensor} as a plain dict in torch.save's zip format, loadable with torch.load's
// default weights_only=True (and by read_state_dict). Tensors are moved to the CPU and made
// contiguous. The file is written to `path`.tmp and renamed, so a reader never sees half a file.
void write_state_dict(const std::string& path, const std::map<std::string, at::Tensor>& tensors);

}  // namespace voxaug::train
