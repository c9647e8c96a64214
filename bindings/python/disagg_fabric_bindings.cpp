// Python view of the disaggregated-KV fabric side (meridian/fabric.h,
// meridian/kv_block_store.h, meridian/kv_offload.h): InProcessFabric,
// HostBlockStore, KvOffloader with its counters, and PyFabric, the trampoline
// that lets any Python object with the fabric protocol (push/poll/pull/
// release/label/health; NixlFabric, MooncakeFabric) serve the C++ offloader.
//
// GIL: offloader calls release the GIL; PyFabric takes it for every call into
// Python. Errors: a Python exception from a fabric never escapes into the
// offloader: FabricBusy -> kBusy, FabricUnavailable / ConnectionError /
// OSError -> kUnavailable, KeyError -> kNotFound, anything else -> kFailed
// with the exception text; the offloader then falls back and counts it.
// Ownership: the Python KvOffloader keeps its manager, store and fabric alive.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "meridian/fabric.h"
#include "meridian/kv_block_store.h"
#include "meridian/kv_offload.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace meridian::python {
namespace {

/// A contiguous buffer of a Python object, released on scope exit.
class Buffer {
 public:
  Buffer(nb::handle object, int flags, const char* what) {
    if (PyObject_GetBuffer(object.ptr(), &view_, flags) != 0) {
      PyErr_Clear();
      throw nb::type_error((std::string(what) + " must be a contiguous " +
                            ((flags & PyBUF_WRITABLE) != 0 ? "writable " : "") + "bytes-like object; got " +
                            nb::type_name(object.type()).c_str())
                               .c_str());
    }
    held_ = true;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&&) = delete;
  Buffer& operator=(Buffer&&) = delete;
  ~Buffer() {
    if (held_) PyBuffer_Release(&view_);
  }
  [[nodiscard]] std::span<std::byte> bytes() const {
    return {static_cast<std::byte*>(view_.buf), static_cast<std::size_t>(view_.len)};
  }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

/// Whether the exception's type has a class named `name` in its MRO (the
/// fabric errors live in Python, meridian.disagg.errors; matching by name
/// needs no import from C++).
bool has_base_named(const nb::python_error& e, const char* name) {
  const nb::handle type = e.type();
  const nb::object mro = nb::getattr(type, "__mro__", nb::none());
  if (mro.is_none()) return false;
  for (nb::handle base : mro) {
    if (std::strcmp(nb::type_name(base).c_str(), name) == 0) return true;
    const nb::object short_name = nb::getattr(base, "__name__", nb::none());
    if (!short_name.is_none() && nb::cast<std::string>(short_name) == name) return true;
  }
  return false;
}

FabricStatus status_of(const nb::python_error& e) {
  if (has_base_named(e, "FabricBusy")) return FabricStatus::kBusy;
  if (e.matches(PyExc_OSError)) return FabricStatus::kUnavailable;  // ConnectionError, FabricUnavailable
  if (e.matches(PyExc_KeyError)) return FabricStatus::kNotFound;
  return FabricStatus::kFailed;
}

/// A Python object with the fabric protocol, as a meridian::Fabric.
class PyFabric final : public Fabric {
 public:
  explicit PyFabric(nb::object fabric) : fabric_(std::move(fabric)) {}
  ~PyFabric() override {
    const nb::gil_scoped_acquire gil;
    fabric_.reset();
  }

  PushResult push(std::span<const std::byte> payload) override {
    const nb::gil_scoped_acquire gil;
    try {
      // A copy, not a view: the fabric may hold the payload past this call
      // (an async NIXL write) while the offloader reuses its buffer.
      const nb::bytes data(payload.data(), payload.size());
      const auto handle = nb::cast<FabricHandle>(fabric_.attr("push")(data));
      return {FabricStatus::kOk, handle, {}};
    } catch (nb::python_error& e) {
      return {status_of(e), 0, e.what()};
    } catch (const nb::cast_error& e) {
      return {FabricStatus::kFailed, 0, std::string("push() did not return an int handle: ") + e.what()};
    }
  }

  TransferState poll(FabricHandle handle) override {
    const nb::gil_scoped_acquire gil;
    try {
      const auto state = nb::cast<std::string>(fabric_.attr("poll")(handle));
      if (state == "in_flight") return TransferState::kInFlight;
      if (state == "committed") return TransferState::kCommitted;
      if (state == "unknown") return TransferState::kUnknown;
      return TransferState::kFailed;  // "failed", or anything the protocol does not name
    } catch (nb::python_error& e) {
      return e.matches(PyExc_KeyError) ? TransferState::kUnknown : TransferState::kFailed;
    } catch (const nb::cast_error&) {
      return TransferState::kFailed;
    }
  }

  PullResult pull(FabricHandle handle, std::vector<std::byte>& out) override {
    const nb::gil_scoped_acquire gil;
    try {
      const nb::object data = fabric_.attr("pull")(handle);
      const Buffer buffer(data, PyBUF_SIMPLE, "pull() result");
      out.assign(buffer.bytes().begin(), buffer.bytes().end());
      return {};
    } catch (nb::python_error& e) {
      return {status_of(e), e.what()};
    } catch (const nb::builtin_exception& e) {
      return {FabricStatus::kFailed, e.what()};
    }
  }

  void release(FabricHandle handle) override {
    const nb::gil_scoped_acquire gil;
    try {
      fabric_.attr("release")(handle);
    } catch (nb::python_error& e) {  // release is idempotent and best effort
      e.discard_as_unraisable("meridian PyFabric.release");
    }
  }

  [[nodiscard]] std::string label() const override {
    const nb::gil_scoped_acquire gil;
    try {
      return nb::cast<std::string>(fabric_.attr("label")());
    } catch (nb::python_error& e) {
      e.restore();
      PyErr_Clear();
      return "unknown";
    } catch (const nb::cast_error&) {
      return "unknown";
    }
  }

  [[nodiscard]] FabricHealth health() override {
    const nb::gil_scoped_acquire gil;
    FabricHealth h;
    try {
      const nb::dict d = nb::cast<nb::dict>(fabric_.attr("health")());
      const auto get = [&d](const char* key) { return d.contains(key) ? nb::object(d[key]) : nb::object(); };
      if (nb::object v = get("up"); v.is_valid()) h.up = nb::cast<bool>(v);
      if (nb::object v = get("in_flight"); v.is_valid()) h.in_flight = nb::cast<std::uint64_t>(v);
      if (nb::object v = get("stored_bytes"); v.is_valid()) h.stored_bytes = nb::cast<std::uint64_t>(v);
      if (nb::object v = get("capacity_bytes"); v.is_valid()) h.capacity_bytes = nb::cast<std::uint64_t>(v);
      if (nb::object v = get("detail"); v.is_valid()) h.detail = nb::cast<std::string>(nb::str(v));
    } catch (nb::python_error& e) {
      h.up = false;
      h.detail = e.what();
    } catch (const nb::cast_error& e) {
      h.up = false;
      h.detail = std::string("health() did not return the protocol's dict: ") + e.what();
    }
    return h;
  }

 private:
  nb::object fabric_;
};

/// The Python HostBlockStore: an owned arena, or a view of a writable Python
/// buffer (bytearray, numpy array, torch CPU tensor) held for the store's life.
struct PyBlockStore {
  std::unique_ptr<Buffer> buffer;  ///< the viewed object's buffer, when not owned
  nb::object keep;                 ///< the viewed object
  std::unique_ptr<HostBlockStore> store;

  std::span<std::byte> block(BlockId b) const { return store->block_bytes(b); }
};

/// The Python KvOffloader: the C++ offloader plus the PyFabric adapter it may use.
struct PyOffloader {
  std::unique_ptr<PyFabric> adapter;  ///< set when the fabric is a Python object
  KvBlockManager* manager = nullptr;
  std::unique_ptr<KvOffloader> offloader;  ///< destroyed first: it releases handles through the fabric

  ~PyOffloader() { offloader.reset(); }
};

nb::dict fallbacks_dict(const KvOffloadCounters& c) {
  nb::dict d;
  for (std::size_t i = 0; i < kOffloadFallbackReasonCount; ++i) {
    d[nb::str(std::string(to_string(static_cast<OffloadFallbackReason>(i))).c_str())] = c.fallbacks[i];
  }
  return d;
}

void bind_fabric_types(nb::module_& m) {
  nb::enum_<FabricStatus>(m, "FabricStatus")
      .value("OK", FabricStatus::kOk)
      .value("BUSY", FabricStatus::kBusy)
      .value("UNAVAILABLE", FabricStatus::kUnavailable)
      .value("NOT_FOUND", FabricStatus::kNotFound)
      .value("FAILED", FabricStatus::kFailed);

  // Follows the Python fabric protocol too, so Python code can drive it like NIXL or Mooncake.
  nb::class_<InProcessFabric>(
      m, "InProcessFabric", "In-process fabric (telemetry label 'nixl-synth') with fault switches for tests")
      .def(
          "__init__",
          [](InProcessFabric* self, std::uint64_t capacity_bytes, std::uint32_t max_entries,
             std::uint32_t commit_after_polls) {
            new (self) InProcessFabric({capacity_bytes, max_entries, commit_after_polls});
          },
          "capacity_bytes"_a = 1ULL << 30U, "max_entries"_a = 1U << 16U, "commit_after_polls"_a = 0U)
      .def(
          "push",
          [](InProcessFabric& f, nb::handle payload) {
            const Buffer buffer(payload, PyBUF_SIMPLE, "payload");
            const PushResult r = f.push(buffer.bytes());
            if (r.status == FabricStatus::kOk) return r.handle;
            const char* error = r.status == FabricStatus::kBusy ? "FabricBusy" : "FabricUnavailable";
            const nb::object errors = nb::module_::import_("meridian.disagg.errors");
            PyErr_SetString(errors.attr(error).ptr(), r.message.c_str());
            throw nb::python_error();
          },
          "payload"_a)
      .def(
          "poll", [](InProcessFabric& f, FabricHandle h) { return std::string(to_string(f.poll(h))); },
          "handle"_a)
      .def(
          "pull",
          [](InProcessFabric& f, FabricHandle h) {
            std::vector<std::byte> out;
            const PullResult r = f.pull(h, out);
            if (r.status == FabricStatus::kNotFound) throw nb::key_error(r.message.c_str());
            if (r.status != FabricStatus::kOk) {
              const nb::object errors = nb::module_::import_("meridian.disagg.errors");
              const char* error =
                  r.status == FabricStatus::kUnavailable ? "FabricUnavailable" : "FabricTransferFailed";
              PyErr_SetString(errors.attr(error).ptr(), r.message.c_str());
              throw nb::python_error();
            }
            return nb::bytes(out.data(), out.size());
          },
          "handle"_a)
      .def("release", &InProcessFabric::release, "handle"_a)
      .def("label", &InProcessFabric::label)
      .def("health",
           [](InProcessFabric& f) {
             const FabricHealth h = f.health();
             nb::dict d;
             d["up"] = h.up;
             d["in_flight"] = h.in_flight;
             d["stored_bytes"] = h.stored_bytes;
             d["capacity_bytes"] = h.capacity_bytes;
             d["detail"] = h.detail;
             return d;
           })
      .def("set_down", &InProcessFabric::set_down, "down"_a)
      .def("corrupt_byte", &InProcessFabric::corrupt_byte, "handle"_a, "offset"_a)
      .def_prop_ro("entries", &InProcessFabric::entries);

  nb::class_<PyBlockStore>(m, "HostBlockStore",
                           "Bytes of KV blocks: an owned page-aligned arena, or a view of a writable buffer")
      .def(
          "__init__",
          [](PyBlockStore* self, std::uint32_t num_blocks, std::uint64_t block_size_bytes,
             nb::object buffer) {
            new (self) PyBlockStore();
            if (buffer.is_none()) {
              self->store = std::make_unique<HostBlockStore>(num_blocks, block_size_bytes);
              return;
            }
            self->buffer = std::make_unique<Buffer>(buffer, PyBUF_WRITABLE, "buffer");
            self->keep = buffer;
            self->store =
                std::make_unique<HostBlockStore>(self->buffer->bytes(), num_blocks, block_size_bytes);
          },
          "num_blocks"_a, "block_size_bytes"_a, "buffer"_a = nb::none())
      .def_prop_ro("num_blocks", [](const PyBlockStore& s) { return s.store->num_blocks(); })
      .def_prop_ro("block_size_bytes", [](const PyBlockStore& s) { return s.store->block_size_bytes(); })
      .def_prop_ro("owns_memory", [](const PyBlockStore& s) { return s.store->owns_memory(); })
      .def(
          "read_block",
          [](const PyBlockStore& s, BlockId b) {
            const auto bytes = s.block(b);
            return nb::bytes(bytes.data(), bytes.size());
          },
          "block"_a, "A copy of the block's bytes")
      .def(
          "write_block",
          [](const PyBlockStore& s, BlockId b, nb::handle data) {
            const auto dst = s.block(b);
            const Buffer src(data, PyBUF_SIMPLE, "data");
            if (src.bytes().size() != dst.size()) {
              throw nb::value_error(("write_block: block " + std::to_string(b) + " holds " +
                                     std::to_string(dst.size()) + " bytes; got " +
                                     std::to_string(src.bytes().size()))
                                        .c_str());
            }
            std::memcpy(dst.data(), src.bytes().data(), dst.size());
          },
          "block"_a, "data"_a, "Overwrite the block with `data` (exactly block_size_bytes)")
      .def(
          "block_view",
          [](nb::handle self, BlockId b) {
            const auto bytes = nb::cast<const PyBlockStore&>(self).block(b);
            // A writable uint8 array over the block; it keeps the store alive.
            return nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>>(
                reinterpret_cast<std::uint8_t*>(bytes.data()), {bytes.size()}, self);
          },
          "block"_a, "A writable numpy uint8 view of the block's bytes (keeps the store alive)");
}

void bind_offloader(nb::module_& m) {
  nb::enum_<OffloadFallbackReason>(m, "OffloadFallbackReason")
      .value("BUSY", OffloadFallbackReason::kBusy)
      .value("DOWN", OffloadFallbackReason::kDown)
      .value("QUEUE_FULL", OffloadFallbackReason::kQueueFull)
      .value("FAILED", OffloadFallbackReason::kFailed)
      .value("TIMEOUT", OffloadFallbackReason::kTimeout);
  nb::enum_<IngestStatus>(m, "IngestStatus")
      .value("OK", IngestStatus::kOk)
      .value("PARTIAL", IngestStatus::kPartial)
      .value("OUT_OF_BLOCKS", IngestStatus::kOutOfBlocks);

  nb::class_<KvOffloaderOptions>(m, "KvOffloaderOptions")
      .def(nb::init<>())
      .def_static("from_config", &KvOffloaderOptions::from_config, "config"_a)
      .def_rw("offload_threshold_blocks", &KvOffloaderOptions::offload_threshold_blocks)
      .def_rw("max_inflight_batches", &KvOffloaderOptions::max_inflight_batches)
      .def_prop_rw(
          "transfer_timeout_ms", [](const KvOffloaderOptions& o) { return o.transfer_timeout.count(); },
          [](KvOffloaderOptions& o, std::int64_t ms) { o.transfer_timeout = std::chrono::milliseconds(ms); });

  nb::class_<KvOffloadCounters>(m, "KvOffloadCounters")
      .def_ro("batches_pushed", &KvOffloadCounters::batches_pushed)
      .def_ro("batches_committed", &KvOffloadCounters::batches_committed)
      .def_ro("batches_cancelled", &KvOffloadCounters::batches_cancelled)
      .def_prop_ro("blocks_offloaded",
                   [](const KvOffloadCounters& c) {
                     return std::vector<std::uint64_t>(c.blocks_offloaded.begin(), c.blocks_offloaded.end());
                   })
      .def_prop_ro("blocks_offloaded_total", &KvOffloadCounters::blocks_offloaded_total)
      .def_ro("blocks_ingested", &KvOffloadCounters::blocks_ingested)
      .def_ro("bytes_pushed", &KvOffloadCounters::bytes_pushed)
      .def_ro("bytes_pulled", &KvOffloadCounters::bytes_pulled)
      .def_prop_ro("fallbacks", &fallbacks_dict, "Batches kept local, by reason name")
      .def_ro("fallback_blocks", &KvOffloadCounters::fallback_blocks)
      .def_ro("corrupt_payloads", &KvOffloadCounters::corrupt_payloads)
      .def_ro("pull_failures", &KvOffloadCounters::pull_failures)
      .def_ro("recompute_blocks", &KvOffloadCounters::recompute_blocks)
      .def_ro("inflight_batches", &KvOffloadCounters::inflight_batches);

  nb::class_<OffloadStart>(m, "OffloadStart")
      .def_ro("batches_pushed", &OffloadStart::batches_pushed)
      .def_ro("blocks_pushed", &OffloadStart::blocks_pushed)
      .def_ro("batches_fallen_back", &OffloadStart::batches_fallen_back)
      .def_ro("blocks_fallen_back", &OffloadStart::blocks_fallen_back)
      .def_prop_ro("all_pushed", &OffloadStart::all_pushed);
  nb::class_<OffloadProgress>(m, "OffloadProgress")
      .def_ro("batches_committed", &OffloadProgress::batches_committed)
      .def_ro("blocks_committed", &OffloadProgress::blocks_committed)
      .def_ro("batches_failed", &OffloadProgress::batches_failed)
      .def_ro("batches_cancelled", &OffloadProgress::batches_cancelled);
  nb::class_<IngestResult>(m, "IngestResult")
      .def_ro("status", &IngestResult::status)
      .def_ro("restored", &IngestResult::restored)
      .def_ro("recompute_positions", &IngestResult::recompute_positions)
      .def_ro("reclaimed", &IngestResult::reclaimed)
      .def_ro("detail", &IngestResult::detail);

  nb::class_<BlockLocation>(m, "BlockLocation")
      .def_prop_ro(
          "kind",
          [](const BlockLocation& l) { return l.kind == BlockLocation::Kind::kLocal ? "local" : "remote"; })
      .def_ro("block", &BlockLocation::block)
      .def_prop_ro("handle", [](const BlockLocation& l) { return l.remote.handle; })
      .def_prop_ro("frame", [](const BlockLocation& l) { return l.remote.frame; })
      .def_prop_ro("tier", [](const BlockLocation& l) { return l.remote.tier; })
      .def("__repr__", [](const BlockLocation& l) {
        return l.kind == BlockLocation::Kind::kLocal
                   ? "BlockLocation(local, block=" + std::to_string(l.block) + ")"
                   : "BlockLocation(remote, handle=" + std::to_string(l.remote.handle) +
                         ", frame=" + std::to_string(l.remote.frame) + ")";
      });

  using Release = nb::call_guard<nb::gil_scoped_release>;
  nb::class_<PyOffloader>(m, "KvOffloader",
                          "Moves KV blocks to a fabric as MRDN v1 payloads and back (meridian/kv_offload.h)")
      .def(
          "__init__",
          [](PyOffloader* self, KvBlockManager& manager, PyBlockStore& store, nb::object fabric,
             const KvOffloaderOptions& options) {
            new (self) PyOffloader();
            Fabric* target = nullptr;
            if (InProcessFabric* native = nullptr; nb::try_cast<InProcessFabric*>(fabric, native) && native) {
              target = native;
            } else {
              for (const char* method : {"push", "poll", "pull", "release", "label", "health"}) {
                if (!nb::hasattr(fabric, method)) {
                  throw nb::type_error((std::string("fabric has no ") + method +
                                        "(): it must follow the meridian.disagg fabric protocol")
                                           .c_str());
                }
              }
              self->adapter = std::make_unique<PyFabric>(fabric);
              target = self->adapter.get();
            }
            self->manager = &manager;
            self->offloader = std::make_unique<KvOffloader>(manager, *store.store, *target, options);
          },
          "manager"_a, "store"_a, "fabric"_a, "options"_a = KvOffloaderOptions{}, nb::keep_alive<1, 2>(),
          nb::keep_alive<1, 3>(), nb::keep_alive<1, 4>())
      .def(
          "on_exit_think", [](PyOffloader& o, RequestId r) { return o.offloader->on_exit_think(r); },
          "request_id"_a, Release())
      .def(
          "offload_for_preemption",
          [](PyOffloader& o, RequestId r) { return o.offloader->offload_for_preemption(r); }, "request_id"_a,
          Release())
      .def(
          "poll", [](PyOffloader& o) { return o.offloader->poll(); }, Release())
      .def(
          "ingest", [](PyOffloader& o, RequestId r) { return o.offloader->ingest(r); }, "request_id"_a,
          Release())
      .def(
          "on_release", [](PyOffloader& o, RequestId r) { o.offloader->on_release(r); }, "request_id"_a,
          Release())
      .def_prop_ro("counters", [](const PyOffloader& o) { return o.offloader->counters(); })  // a snapshot
      .def_prop_ro("options", [](const PyOffloader& o) { return o.offloader->options(); })
      .def_prop_ro("fabric_label", [](const PyOffloader& o) { return o.offloader->fabric_label(); })
      .def(
          "committed_handles",
          [](const PyOffloader& o, RequestId r) { return o.offloader->committed_handles(r); }, "request_id"_a)
      .def(
          "block_locations", [](const PyOffloader& o, RequestId r) { return o.manager->block_locations(r); },
          "request_id"_a, "The request's blocks in logical order: local, or remote (handle, frame, tier)");
}

}  // namespace

void bind_disagg_fabric(nb::module_& m) {
  bind_fabric_types(m);
  bind_offloader(m);
}

}  // namespace meridian::python
