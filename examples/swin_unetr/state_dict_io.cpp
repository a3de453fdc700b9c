// State-dict checkpoints in torch.save's zip format (see state_dict_io.h).
//
// A torch.save file is a zip archive <name>/data.pkl + <name>/data/<key> (one record per
// storage, raw little-endian bytes) + <name>/version and a few small records. data.pkl is a
// pickle (protocol 2) whose tensors are calls of torch._utils._rebuild_tensor_v2(storage,
// storage_offset, size, stride, requires_grad, backward_hooks[, metadata]) on persistent ids
// ("storage", torch.<Type>Storage, key, location, numel). A state dict is an OrderedDict: its
// items come by SETITEMS and its _metadata attribute (per-module versions) by BUILD.
#include "state_dict_io.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "state_dict_io.cpp copies torch.save's little-endian storages as they are"
#endif

namespace voxaug::train {
namespace {

// A Python object of the subset torch.save writes for state dicts. Containers are shared
// pointers because the pickle memo refers to an object that later opcodes still fill.
struct Value;
using ValuePtr = std::shared_ptr<Value>;

enum class Kind {
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kTuple,
  kList,
  kDict,
  kGlobal,
  kStorage,
  kTensor
};

// A dict's str and int keys -> their position in Value::entries: SETITEM and lookups are O(1) on
// average (a linear scan per insert made a state dict of 20000 keys take over a second), while
// `entries` keeps Python's insertion order.
struct DictIndex {
  std::unordered_map<std::string, size_t> str;
  std::unordered_map<int64_t, size_t> integer;
};

struct Value {
  Kind kind = Kind::kNone;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;                                       // kString; kGlobal: "module.name"
  std::vector<ValuePtr> items;                         // kTuple, kList
  std::vector<std::pair<ValuePtr, ValuePtr>> entries;  // kDict, in insertion order
  std::unique_ptr<DictIndex> index;                    // kDict with a str / int key, else null
  bool ordered = false;                                // kDict made by collections.OrderedDict()
  at::ScalarType dtype = at::kFloat;                   // kGlobal of a storage type
  at::Tensor tensor;                                   // kStorage (1-D, all of it), kTensor
};

ValuePtr make(Kind k) {
  auto v = std::make_shared<Value>();
  v->kind = k;
  return v;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kTuple: return "tuple";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kGlobal: return "global";
    case Kind::kStorage: return "storage";
    case Kind::kTensor: return "tensor";
  }
  return "?";
}

// torch.<Type>Storage as _rebuild_tensor_v2 files name them (the dtypes whose storages are typed;
// newer dtypes go through _rebuild_tensor_v3, which is refused as an unknown global).
struct StorageType {
  const char* name;
  at::ScalarType dtype;
};
constexpr StorageType kStorageTypes[] = {
    {"DoubleStorage", at::kDouble},
    {"FloatStorage", at::kFloat},
    {"HalfStorage", at::kHalf},
    {"BFloat16Storage", at::kBFloat16},
    {"LongStorage", at::kLong},
    {"IntStorage", at::kInt},
    {"ShortStorage", at::kShort},
    {"CharStorage", at::kChar},
    {"ByteStorage", at::kByte},
    {"BoolStorage", at::kBool},
    {"ComplexFloatStorage", at::kComplexFloat},
    {"ComplexDoubleStorage", at::kComplexDouble},
};

// Every pickle opcode's name (protocols 0-5), for the error on one this reader does not cover.
const char* opcode_name(uint8_t op) {
  switch (op) {
    case '(': return "MARK";
    case '.': return "STOP";
    case '0': return "POP";
    case '1': return "POP_MARK";
    case '2': return "DUP";
    case 'F': return "FLOAT";
    case 'I': return "INT";
    case 'J': return "BININT";
    case 'K': return "BININT1";
    case 'L': return "LONG";
    case 'M': return "BININT2";
    case 'N': return "NONE";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 'R': return "REDUCE";
    case 'S': return "STRING";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";
    case 'X': return "BINUNICODE";
    case 'a': return "APPEND";
    case 'b': return "BUILD";
    case 'c': return "GLOBAL";
    case 'd': return "DICT";
    case '}': return "EMPTY_DICT";
    case 'e': return "APPENDS";
    case 'g': return "GET";
    case 'h': return "BINGET";
    case 'i': return "INST";
    case 'j': return "LONG_BINGET";
    case 'l': return "LIST";
    case ']': return "EMPTY_LIST";
    case 'o': return "OBJ";
    case 'p': return "PUT";
    case 'q': return "BINPUT";
    case 'r': return "LONG_BINPUT";
    case 's': return "SETITEM";
    case 't': return "TUPLE";
    case ')': return "EMPTY_TUPLE";
    case 'u': return "SETITEMS";
    case 'G': return "BINFLOAT";
    case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 0x80: return "PROTO";
    case 0x81: return "NEWOBJ";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x85: return "TUPLE1";
    case 0x86: return "TUPLE2";
    case 0x87: return "TUPLE3";
    case 0x88: return "NEWTRUE";
    case 0x89: return "NEWFALSE";
    case 0x8a: return "LONG1";
    case 0x8b: return "LONG4";
    case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8";
    case 0x8e: return "BINBYTES8";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x92: return "NEWOBJ_EX";
    case 0x93: return "STACK_GLOBAL";
    case 0x94: return "MEMOIZE";
    case 0x95: return "FRAME";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
  }
  return "not a pickle opcode";
}

// The first line of an exception's message, without c10's backtrace and its request for a
// better message.
std::string first_line(const std::exception& e) {
  std::string s = e.what();
  s = s.substr(0, s.find('\n'));
  return s.substr(0, s.find("  (Could this error message be improved?"));
}

// "a dict", "an int": for messages naming what a value is.
std::string a_kind(Kind k) {
  const std::string n = kind_name(k);
  return (n == "int" ? "an " : "a ") + n;
}

// Reads one data.pkl. Owns every tuple, list and dict it makes (containers_) and frees them flat
// in its destructor: a hostile file nesting containers 10^5 deep (or in a cycle through the memo)
// would otherwise overflow the stack in the recursive shared_ptr release, or leak. So the values
// run() returns are valid while the Unpickler lives.
class Unpickler {
 public:
  Unpickler(const std::string& path, caffe2::serialize::PyTorchStreamReader& archive,
            const uint8_t* data, size_t size)
      : path_(path), archive_(archive), data_(data), size_(size) {}
  Unpickler(const Unpickler&) = delete;
  Unpickler& operator=(const Unpickler&) = delete;
  ~Unpickler() {
    for (const auto& c : containers_) {
      c->items.clear();  // children stay owned by containers_: no recursion
      c->entries.clear();
    }
  }

  ValuePtr run() {
    while (true) {
      op_pos_ = pos_;
      const uint8_t op = u8();
      switch (op) {
        case 0x80:  // PROTO
          protocol_ = u8();
          break;
        case '.':  // STOP
          if (stack_.size() != 1 || !marks_.empty()) fail("STOP with an unbalanced stack");
          return stack_.back();
        case '(':  // MARK
          marks_.push_back(stack_.size());
          break;
        case ')': stack_.push_back(container(Kind::kTuple)); break;
        case 't': {  // TUPLE
          auto t = container(Kind::kTuple);
          t->items = pop_mark();
          stack_.push_back(t);
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          const size_t n = op - 0x84u;
          if (stack_.size() < n + (marks_.empty() ? 0 : marks_.back()))
            fail("stack underflow");  // (Python: nothing below a MARK is reachable)
          auto t = container(Kind::kTuple);
          t->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          stack_.push_back(t);
          break;
        }
        case ']': stack_.push_back(container(Kind::kList)); break;
        case 'a': {  // APPEND
          auto v = pop();
          list_on_top()->items.push_back(v);
          break;
        }
        case 'e': {  // APPENDS
          auto vs = pop_mark();
          auto& items = list_on_top()->items;
          items.insert(items.end(), vs.begin(), vs.end());
          break;
        }
        case '}': stack_.push_back(container(Kind::kDict)); break;
        case 's': {  // SETITEM
          auto v = pop();
          auto k = pop();
          set_item(dict_on_top(), k, v);
          break;
        }
        case 'u': {  // SETITEMS
          auto kv = pop_mark();
          if (kv.size() % 2) fail("SETITEMS with an odd number of items");
          auto d = dict_on_top();
          for (size_t j = 0; j < kv.size(); j += 2) set_item(d, kv[j], kv[j + 1]);
          break;
        }
        case 'N': stack_.push_back(make(Kind::kNone)); break;
        case 0x88:
        case 0x89: {  // NEWTRUE, NEWFALSE
          auto v = make(Kind::kBool);
          v->b = op == 0x88;
          stack_.push_back(v);
          break;
        }
        case 'J': push_int(static_cast<int32_t>(static_cast<uint32_t>(le(4)))); break;
        case 'K': push_int(u8()); break;
        case 'M': push_int(static_cast<int64_t>(le(2))); break;
        case 0x8a: {  // LONG1: n bytes of two's complement, little-endian
          const size_t n = u8();
          if (n > 8) fail("LONG1 of " + std::to_string(n) + " bytes (more than 64 bits)");
          uint64_t u = le(n);
          if (n > 0 && n < 8 && (u >> (8 * n - 1)) & 1u) u |= ~uint64_t{0} << (8 * n);  // sign
          push_int(static_cast<int64_t>(u));
          break;
        }
        case 'G': {  // BINFLOAT: big-endian IEEE double
          uint64_t u = 0;
          for (const uint8_t c : bytes(8)) u = (u << 8) | c;
          auto v = make(Kind::kFloat);
          std::memcpy(&v->f, &u, sizeof u);
          stack_.push_back(v);
          break;
        }
        case 'X': {  // BINUNICODE: 4-byte length, UTF-8
          const uint64_t n = le(4);
          auto v = make(Kind::kString);
          const auto b = bytes(n);
          v->s.assign(b.begin(), b.end());
          stack_.push_back(v);
          break;
        }
        case 'c': global(); break;
        case 'R': {  // REDUCE
          auto args = pop();
          auto fn = pop();
          stack_.push_back(reduce(fn, args));
          break;
        }
        case 'b': {  // BUILD: only an OrderedDict's attributes (state_dict()'s _metadata)
          auto state = pop();
          const auto& obj = top();
          if (obj->kind != Kind::kDict || !obj->ordered ||
              (state->kind != Kind::kDict && state->kind != Kind::kNone))
            fail("BUILD of " + a_kind(obj->kind) + " from " + a_kind(state->kind) +
                 " (only an OrderedDict's attributes are read)");
          break;  // the attributes (per-module versions) carry no tensors
        }
        case 'Q': stack_.push_back(storage(pop())); break;  // BINPERSID
        case 'q': memo_[static_cast<uint32_t>(u8())] = top(); break;
        case 'r': memo_[static_cast<uint32_t>(le(4))] = top(); break;
        case 'h': stack_.push_back(memo_get(u8())); break;
        case 'j': stack_.push_back(memo_get(static_cast<uint32_t>(le(4)))); break;
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          fail(std::string("cannot read opcode ") + hex + " (" + opcode_name(op) +
               "): this reader covers the pickle protocol 2 that torch.save writes for state "
               "dicts (this file declares protocol " +
               std::to_string(protocol_) + ")");
        }
      }
    }
  }

 private:
  ValuePtr container(Kind k) {
    containers_.push_back(make(k));
    return containers_.back();
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(path_ + ": data.pkl, byte " + std::to_string(op_pos_) + ": " + what);
  }

  uint8_t u8() {
    if (pos_ >= size_) fail("data.pkl ends without STOP");
    return data_[pos_++];
  }
  std::vector<uint8_t> bytes(uint64_t n) {
    if (n > size_ - pos_) fail("data.pkl ends inside an opcode's argument");
    std::vector<uint8_t> b(data_ + pos_, data_ + pos_ + n);
    pos_ += n;
    return b;
  }
  uint64_t le(size_t n) {  // n-byte little-endian unsigned
    uint64_t u = 0;
    const auto b = bytes(n);
    for (size_t j = 0; j < n; ++j) u |= uint64_t{b[j]} << (8 * j);
    return u;
  }
  void push_int(int64_t x) {
    auto v = make(Kind::kInt);
    v->i = x;
    stack_.push_back(v);
  }
  const ValuePtr& top() const {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back()))
      fail("stack underflow");
    return stack_.back();
  }
  ValuePtr pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back()))
      fail("stack underflow");
    auto v = stack_.back();
    stack_.pop_back();
    return v;
  }
  std::vector<ValuePtr> pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<ValuePtr> vs(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return vs;
  }
  ValuePtr memo_get(uint32_t k) const {
    const auto it = memo_.find(k);
    if (it == memo_.end()) fail("memo entry " + std::to_string(k) + " was never stored");
    return it->second;
  }
  const ValuePtr& list_on_top() const {
    const auto& v = top();
    if (v->kind != Kind::kList) fail("APPEND(S) to " + a_kind(v->kind));
    return v;
  }
  const ValuePtr& dict_on_top() const {
    const auto& v = top();
    if (v->kind != Kind::kDict) fail("SETITEM(S) on " + a_kind(v->kind));
    return v;
  }
  // Python semantics for the keys a state dict / optimizer state uses (str, int): a repeated key
  // replaces the value in place (keeping its first position). Keys of other kinds are appended.
  static void set_item(const ValuePtr& d, const ValuePtr& k, const ValuePtr& v) {
    if (k->kind == Kind::kString || k->kind == Kind::kInt) {
      if (!d->index) d->index = std::make_unique<DictIndex>();
      const size_t next = d->entries.size();
      const size_t pos = k->kind == Kind::kString
                             ? d->index->str.try_emplace(k->s, next).first->second
                             : d->index->integer.try_emplace(k->i, next).first->second;
      if (pos != next) {
        d->entries[pos].second = v;
        return;
      }
    }
    d->entries.emplace_back(k, v);
  }

  // GLOBAL "module\nname\n": the only callables torch.save needs for a state dict.
  void global() {
    auto line = [&] {
      std::string s;
      for (uint8_t c = u8(); c != '\n'; c = u8()) s.push_back(static_cast<char>(c));
      return s;
    };
    const std::string module = line(), name = line();
    auto g = make(Kind::kGlobal);
    g->s = module + "." + name;
    if (g->s == "collections.OrderedDict" || g->s == "torch._utils._rebuild_tensor_v2") {
      stack_.push_back(g);
      return;
    }
    if (module == "torch") {
      for (const auto& t : kStorageTypes) {
        if (name == t.name) {
          g->dtype = t.dtype;
          stack_.push_back(g);
          return;
        }
      }
    }
    fail("cannot read global '" + g->s +
         "': only collections.OrderedDict, "
         "torch._utils._rebuild_tensor_v2 and torch.<Type>Storage are read (a state dict of "
         "tensors in (Ordered)dicts)");
  }

  ValuePtr reduce(const ValuePtr& fn, const ValuePtr& args) {
    if (fn->kind != Kind::kGlobal || args->kind != Kind::kTuple)
      fail("REDUCE of " + a_kind(fn->kind) + " with " + a_kind(args->kind));
    if (fn->s == "collections.OrderedDict") {
      if (!args->items.empty()) fail("OrderedDict(...) with arguments");
      auto d = container(Kind::kDict);
      d->ordered = true;
      return d;
    }
    if (fn->s == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(args->items);
    fail("cannot call '" + fn->s + "'");
  }

  // BINPERSID ("storage", torch.<Type>Storage, key, location, numel): the record data/<key>,
  // read once per key (tensors that share a storage name the same key).
  ValuePtr storage(const ValuePtr& pid) {
    const auto& p = pid->items;
    if (pid->kind != Kind::kTuple || p.size() != 5 || p[0]->kind != Kind::kString ||
        p[0]->s != "storage" || p[1]->kind != Kind::kGlobal || p[2]->kind != Kind::kString ||
        p[3]->kind != Kind::kString || p[4]->kind != Kind::kInt)
      fail("a persistent id that is not ('storage', torch.<Type>Storage, key, location, numel)");
    if (p[1]->s.rfind("torch.", 0) != 0 || p[1]->s.find("Storage") == std::string::npos)
      fail("a persistent id whose storage type is '" + p[1]->s + "'");
    const at::ScalarType dtype = p[1]->dtype;
    const std::string& key = p[2]->s;
    const int64_t numel = p[4]->i;
    auto v = make(Kind::kStorage);
    const auto it = storages_.find(key);
    if (it != storages_.end()) {
      if (it->second.scalar_type() != dtype || it->second.numel() != numel)
        fail("storage '" + key + "' appears with two types or sizes");
      v->tensor = it->second;
      return v;
    }
    const std::string record = "data/" + key;
    if (numel < 0) fail("storage '" + key + "' with " + std::to_string(numel) + " elements");
    if (!archive_.hasRecord(record)) fail("no record " + record + " for storage '" + key + "'");
    const size_t elem = c10::elementSize(dtype);
    if (static_cast<uint64_t>(numel) > SIZE_MAX / elem) fail("storage '" + key + "' is too large");
    const size_t nbytes = static_cast<size_t>(numel) * elem;
    const size_t have = archive_.getRecordSize(record);
    if (have != nbytes)
      fail("record " + record + " holds " + std::to_string(have) + " bytes, the storage needs " +
           std::to_string(numel) + " x " + std::to_string(elem) + " = " + std::to_string(nbytes));
    at::Tensor t = at::empty({numel}, at::TensorOptions().dtype(dtype));
    if (nbytes > 0) archive_.getRecord(record, t.data_ptr(), nbytes);
    storages_.emplace(key, t);
    v->tensor = t;
    return v;
  }

  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks
  // [, metadata]): a view of the storage, checked to lie inside it.
  ValuePtr rebuild_tensor(const std::vector<ValuePtr>& a) {
    if ((a.size() != 6 && a.size() != 7) || a[0]->kind != Kind::kStorage ||
        a[1]->kind != Kind::kInt || a[2]->kind != Kind::kTuple || a[3]->kind != Kind::kTuple ||
        a[4]->kind != Kind::kBool || a[5]->kind != Kind::kDict ||
        (a.size() == 7 && a[6]->kind != Kind::kDict))
      fail(
          "_rebuild_tensor_v2 arguments are not (storage, offset, size, stride, requires_grad, "
          "hooks[, metadata])");
    if (a.size() == 7) {
      for (const auto& [k, v] : a[6]->entries)
        if (v->kind == Kind::kBool && v->b)
          fail("a tensor with metadata '" + (k->kind == Kind::kString ? k->s : "?") +
               "' set (conjugate / negative views are not read)");
    }
    const at::Tensor& storage = a[0]->tensor;
    const int64_t offset = a[1]->i;
    std::vector<int64_t> size, stride;
    for (const auto& x : a[2]->items) {
      if (x->kind != Kind::kInt || x->i < 0) fail("a tensor size that is not an int >= 0");
      size.push_back(x->i);
    }
    for (const auto& x : a[3]->items) {
      if (x->kind != Kind::kInt || x->i < 0) fail("a tensor stride that is not an int >= 0");
      stride.push_back(x->i);
    }
    if (size.size() != stride.size()) fail("a tensor with as many sizes as strides");
    // The last element's index (offset + sum (size - 1) * stride) must lie in the storage.
    bool empty = false;
    int64_t last = offset;
    for (size_t d = 0; d < size.size(); ++d) {
      if (size[d] == 0) empty = true;
      int64_t ext = 0;
      if (size[d] > 0 && (__builtin_mul_overflow(size[d] - 1, stride[d], &ext) ||
                          __builtin_add_overflow(last, ext, &last)))
        fail("a tensor whose extent overflows int64");
    }
    if (offset < 0 || (empty ? offset > storage.numel() : last >= storage.numel()))
      fail("a tensor (offset " + std::to_string(offset) + ", size " +
           c10::str(at::IntArrayRef(size)) + ", stride " + c10::str(at::IntArrayRef(stride)) +
           ") outside its storage of " + std::to_string(storage.numel()) + " elements");
    auto v = make(Kind::kTensor);
    v->tensor = at::empty({0}, storage.options()).set_(storage.storage(), offset, size, stride);
    return v;
  }

  const std::string& path_;
  caffe2::serialize::PyTorchStreamReader& archive_;
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0, op_pos_ = 0;
  int protocol_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, ValuePtr> memo_;
  std::unordered_map<std::string, at::Tensor> storages_;
  std::vector<ValuePtr> containers_;
};

const Value* find_key(const Value& d, const std::string& key) {
  if (!d.index) return nullptr;
  const auto it = d.index->str.find(key);
  return it == d.index->str.end() ? nullptr : d.entries[it->second].second.get();
}

}  // namespace

std::map<std::string, at::Tensor> read_state_dict(const std::string& path) {
  {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(path + ": cannot open the file");
    char magic[2] = {0, 0};
    f.read(magic, 2);
    // torch.save(..., _use_new_zipfile_serialization=False) writes pickles one after another,
    // starting with PROTO; the zip format starts with "PK".
    if (f.gcount() == 2 && static_cast<uint8_t>(magic[0]) == 0x80)
      throw std::runtime_error(path +
                               ": torch.save's legacy (non-zip) format is not read; "
                               "re-save it in Python with torch.save(torch.load(path), new_path)");
  }
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> archive;
  try {
    archive = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not a torch.save checkpoint (zip format): " + first_line(e));
  }
  std::optional<Unpickler> unpickler;  // alive until the tensors are taken out (see the class)
  ValuePtr root;
  try {
    if (!archive->hasRecord("data.pkl"))
      throw std::runtime_error(path + ": a zip archive without data.pkl, not a torch.save file");
    if (archive->hasRecord("byteorder")) {
      const auto [ptr, n] = archive->getRecord("byteorder");
      const std::string order(static_cast<const char*>(ptr.get()), n);
      if (order != "little")
        throw std::runtime_error(path + ": storages in byte order '" + order +
                                 "' (only little-endian files are read)");
    }
    const auto [pkl, n] = archive->getRecord("data.pkl");
    unpickler.emplace(path, *archive, static_cast<const uint8_t*>(pkl.get()), n);
    root = unpickler->run();
  } catch (const c10::Error& e) {  // the archive's own checks (CRC, truncated records)
    throw std::runtime_error(path + ": damaged torch.save archive: " + first_line(e));
  }
  // Unwrap {"state_dict": sd, ...} and the like, up to two levels.
  const Value* d = root.get();
  for (int depth = 0; depth < 2 && d->kind == Kind::kDict; ++depth) {
    const Value* inner = nullptr;
    for (const char* key : {"state_dict", "model", "network", "net"}) {
      const Value* v = find_key(*d, key);
      if (v && v->kind == Kind::kDict) {
        inner = v;
        break;
      }
    }
    if (!inner) break;
    d = inner;
  }
  if (d->kind != Kind::kDict)
    throw std::runtime_error(path + ": holds " + a_kind(d->kind) +
                             ", not a state dict {name: tensor}");
  std::map<std::string, at::Tensor> out;
  for (const auto& [k, v] : d->entries) {
    if (k->kind != Kind::kString)
      throw std::runtime_error(path + ": a state dict key of type " + kind_name(k->kind) +
                               " (names must be str)");
    if (v->kind != Kind::kTensor)
      throw std::runtime_error(path + ": '" + k->s + "' holds " + a_kind(v->kind) +
                               ", not a tensor (a state dict maps names to tensors)");
    out[k->s] = v->tensor;
  }
  return out;
}

size_t strip_data_parallel_prefix(std::map<std::string, at::Tensor>& tensors,
                                  const std::map<std::string, at::Tensor>& model) {
  static const std::string prefix = "module.";
  auto prefixed = [](const auto& kv) { return kv.first.rfind(prefix, 0) == 0; };
  if (tensors.empty() || !std::all_of(tensors.begin(), tensors.end(), prefixed) ||
      std::any_of(model.begin(), model.end(), prefixed))
    return 0;
  std::map<std::string, at::Tensor> stripped;
  for (auto& [k, v] : tensors) stripped.emplace_hint(stripped.end(), k.substr(prefix.size()), v);
  tensors.swap(stripped);
  return tensors.size();
}

// torch::pickle_save tags typed containers with torch.jit._pickle.restore_type_tag, which
// torch.load's weights_only refuses, so the pickler runs here with tag_aggregates = false.
void write_state_dict(const std::string& path, const std::map<std::string, at::Tensor>& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [k, v] : tensors) dict.insert(k, v.detach().to(at::kCPU).contiguous());
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&](const char* buf, size_t n) { pickle.insert(pickle.end(), buf, buf + n); }, nullptr,
      nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  const std::string tmp = path + ".tmp";
  {
    caffe2::serialize::PyTorchStreamWriter writer(tmp);
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(),
                                       writer);
    writer.writeEndOfFile();
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace voxaug::train
