// A disaggregated KV fabric: where offloaded KV payloads (MRDN v1 frames,
// meridian/mrdn.h) go and come back from (SPEC §3.10, ADR-0020).
//
// push() starts a transfer of a payload and returns a handle at once; the
// payload is committed (safe to free the local copy) only when poll() says
// kCommitted — for NIXL the peer's notification, for Mooncake an explicit
// commit signal. pull() copies a committed payload back; release() frees it on
// the fabric. Implementations: InProcessFabric (below, labelled "nixl-synth"),
// and the NIXL and Mooncake fabrics, written in Python over their Python APIs
// (meridian.disagg) and reached from C++ through the bindings (PyFabric).
//
// Thread-safety: a Fabric is used from one thread at a time (the engine
// loop); InProcessFabric is additionally safe to call from several threads.
// Ownership: callers own payload buffers; a fabric copies what it keeps.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meridian {

using FabricHandle = std::uint64_t;

enum class FabricStatus : std::uint8_t {
  kOk = 0,
  kBusy = 1,         ///< back-pressure: the fabric's queue or memory is full; try later
  kUnavailable = 2,  ///< the fabric or its peer is down
  kNotFound = 3,     ///< unknown or released handle
  kFailed = 4,       ///< the transfer failed (peer died mid-transfer, bad range, timeout)
};

enum class TransferState : std::uint8_t {
  kInFlight = 0,
  kCommitted = 1,  ///< the payload is on the fabric; the local copy may go
  kFailed = 2,     ///< never committed; the local copy is still the only one
  kUnknown = 3,    ///< not a handle of this fabric (or released)
};

struct PushResult {
  FabricStatus status = FabricStatus::kOk;
  FabricHandle handle = 0;  ///< valid when status == kOk
  std::string message;      ///< why, when status != kOk
};

struct PullResult {
  FabricStatus status = FabricStatus::kOk;
  std::string message;
};

struct FabricHealth {
  bool up = true;
  std::uint64_t in_flight = 0;     ///< pushes not yet committed or failed
  std::uint64_t stored_bytes = 0;  ///< committed payload bytes held on the fabric
  std::uint64_t capacity_bytes = 0;
  std::string detail;
};

class Fabric {
 public:
  virtual ~Fabric() = default;
  Fabric() = default;
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  /// Starts moving `payload` (one or more MRDN frames) to the fabric.
  virtual PushResult push(std::span<const std::byte> payload) = 0;
  /// Progress of a push.
  virtual TransferState poll(FabricHandle handle) = 0;
  /// Copies a committed payload into `out` (resized to its size).
  virtual PullResult pull(FabricHandle handle, std::vector<std::byte>& out) = 0;
  /// Frees the payload on the fabric; unknown handles are ignored (idempotent).
  virtual void release(FabricHandle handle) = 0;
  /// "nixl", "mooncake" or "nixl-synth": the telemetry label.
  [[nodiscard]] virtual std::string label() const = 0;
  [[nodiscard]] virtual FabricHealth health() = 0;
};

[[nodiscard]] std::string_view to_string(FabricStatus status) noexcept;
[[nodiscard]] std::string_view to_string(TransferState state) noexcept;

struct InProcessFabricOptions {
  std::uint64_t capacity_bytes = 1ULL << 30;  ///< push answers kBusy beyond it
  std::uint32_t max_entries = 1U << 16;       ///< push answers kBusy beyond it
  /// Pushes stay kInFlight for this many poll() calls on them (a slow fabric).
  std::uint32_t commit_after_polls = 0;
};

/// An in-process fabric: payloads in a bounded map, committed at once (or
/// after commit_after_polls polls). Labelled "nixl-synth" in telemetry so no
/// chart mistakes it for a real NIXL transfer. Fault switches for tests and
/// drills: set_down() makes push/pull answer kUnavailable and fails in-flight
/// pushes; corrupt_byte() flips a stored byte. Thread-safe (one mutex).
class InProcessFabric final : public Fabric {
 public:
  explicit InProcessFabric(InProcessFabricOptions options = {});
  ~InProcessFabric() override;

  PushResult push(std::span<const std::byte> payload) override;
  TransferState poll(FabricHandle handle) override;
  PullResult pull(FabricHandle handle, std::vector<std::byte>& out) override;
  void release(FabricHandle handle) override;
  [[nodiscard]] std::string label() const override;
  [[nodiscard]] FabricHealth health() override;

  void set_down(bool down);
  /// Flips bit 0 of byte `offset` of a stored payload; false if no such byte.
  bool corrupt_byte(FabricHandle handle, std::size_t offset);
  [[nodiscard]] std::size_t entries() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meridian
