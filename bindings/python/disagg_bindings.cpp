// Python view of the MRDN v1 codec (meridian/mrdn.h): mrdn_encode, mrdn_decode,
// mrdn_decode_batch, mrdn_checksum and meridian.MrdnError (a ValueError whose
// `status` names the problem and `offset` is its byte offset in the buffer).
// Every payload argument is any C-contiguous bytes-like object (bytes,
// bytearray, memoryview, numpy array, mmap), read in place through the buffer
// protocol; the GIL is released while BLAKE3 runs.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>

#include "bindings.h"
#include "meridian/mrdn.h"

namespace nb = nanobind;

namespace meridian::python {
namespace {

namespace mrdn = meridian::mrdn;

/// meridian.MrdnError; the module attribute keeps the type alive.
PyObject* mrdn_error_type = nullptr;

/// A read-only buffer-protocol view of a bytes-like object, released on scope exit.
class ReadBuffer {
 public:
  explicit ReadBuffer(nb::handle object, const char* what) {
    if (PyObject_GetBuffer(object.ptr(), &view_, PyBUF_SIMPLE) != 0) {
      PyErr_Clear();
      throw nb::type_error((std::string(what) +
                            " must be a contiguous bytes-like object (bytes, bytearray, memoryview); got " +
                            nb::type_name(object.type()).c_str())
                               .c_str());
    }
  }
  ReadBuffer(const ReadBuffer&) = delete;
  ReadBuffer& operator=(const ReadBuffer&) = delete;
  ReadBuffer(ReadBuffer&&) = delete;
  ReadBuffer& operator=(ReadBuffer&&) = delete;
  ~ReadBuffer() { PyBuffer_Release(&view_); }

  [[nodiscard]] std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(view_.buf), static_cast<std::size_t>(view_.len)};
  }

 private:
  Py_buffer view_{};
};

BlockTier tier_from(nb::handle tier) {
  BlockTier value{};
  if (nb::try_cast<BlockTier>(tier, value)) return value;
  if (PyLong_Check(tier.ptr()) != 0 && !PyBool_Check(tier.ptr())) {
    const long long raw = PyLong_AsLongLong(tier.ptr());
    if (raw == -1 && PyErr_Occurred() != nullptr) PyErr_Clear();
    if (raw >= 0 && raw < static_cast<long long>(kBlockTierCount)) return static_cast<BlockTier>(raw);
    throw nb::value_error(("mrdn_encode: tier " + std::string(nb::repr(tier).c_str()) +
                           " is not a BlockTier (0 THINK_COMPLETE, 1 THINK_ACTIVE, 2 OUTPUT_CRITICAL)")
                              .c_str());
  }
  throw nb::type_error(("mrdn_encode: tier must be a meridian.BlockTier or an int; got " +
                        std::string(nb::type_name(tier.type()).c_str()))
                           .c_str());
}

nb::bytes copy_bytes(std::span<const std::byte> data) { return nb::bytes(data.data(), data.size()); }

nb::bytes encode(nb::handle tier, nb::handle body) {
  const BlockTier frame_tier = tier_from(tier);
  const ReadBuffer input(body, "mrdn_encode: body");
  const std::span<const std::byte> bytes = input.bytes();
  if (bytes.size() > mrdn::kMaxBodyBytes) {
    // Checked here, before the output bytes object is allocated; encode_into would say the same.
    std::vector<std::byte> unused;
    mrdn::encode_append(frame_tier, bytes, unused);  // throws WireFormatError(kOversizedBody)
  }
  // Written straight into the result (no intermediate copy).
  PyObject* out = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(mrdn::frame_size(bytes.size())));
  if (out == nullptr) throw nb::python_error();
  nb::bytes result = nb::steal<nb::bytes>(out);
  const std::span<std::byte> target(reinterpret_cast<std::byte*>(PyBytes_AS_STRING(out)),
                                    mrdn::frame_size(bytes.size()));
  {
    const nb::gil_scoped_release release;
    mrdn::encode_into(frame_tier, bytes, target);
  }
  return result;
}

nb::tuple decode(nb::handle buffer) {
  const ReadBuffer input(buffer, "mrdn_decode: buffer");
  mrdn::DecodeResult result;
  {
    const nb::gil_scoped_release release;
    result = mrdn::decode(input.bytes());
  }
  if (!result.ok()) throw mrdn::WireFormatError(result.status, result.offset, result.message());
  return nb::make_tuple(result.frame.tier, copy_bytes(result.frame.body), result.frame.frame_size);
}

nb::list decode_batch(nb::handle buffer) {
  const ReadBuffer input(buffer, "mrdn_decode_batch: buffer");
  mrdn::BatchDecodeResult batch;
  {
    const nb::gil_scoped_release release;
    batch = mrdn::decode_batch(input.bytes());
  }
  if (!batch.error.ok())
    throw mrdn::WireFormatError(batch.error.status, batch.error.offset, batch.error.message());
  nb::list frames;
  for (const mrdn::FrameView& frame : batch.frames)
    frames.append(nb::make_tuple(frame.tier, copy_bytes(frame.body)));
  return frames;
}

nb::bytes checksum(nb::handle data) {
  const ReadBuffer input(data, "mrdn_checksum: data");
  std::array<std::byte, mrdn::kChecksumSize> sum{};
  {
    const nb::gil_scoped_release release;
    sum = mrdn::checksum(input.bytes());
  }
  return copy_bytes(sum);
}

}  // namespace

void bind_disagg(nb::module_& m) {
  const nb::exception<mrdn::WireFormatError> mrdn_error(m, "MrdnError", PyExc_ValueError);
  mrdn_error.attr("__module__") = "meridian";
  mrdn_error.attr("__doc__") =
      "An MRDN v1 payload was rejected (ValueError). `status` names the problem (short_header, bad_magic, "
      "unsupported_version, truncated_body, oversized_body, bad_tier, nonzero_padding, checksum_mismatch) "
      "and "
      "`offset` is its byte offset in the buffer.";
  mrdn_error.attr("status") = "";
  mrdn_error.attr("offset") = -1;
  mrdn_error_type = mrdn_error.ptr();
  // Newer than nb::exception's own translator, so this one runs: it also sets status and offset.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const mrdn::WireFormatError& e) {
      nb::object error = nb::borrow(mrdn_error_type)(e.what());
      error.attr("status") = nb::str(mrdn::to_string(e.status()).data(), mrdn::to_string(e.status()).size());
      error.attr("offset") = e.offset();
      PyErr_SetObject(mrdn_error_type, error.ptr());
    }
  });

  m.attr("MRDN_HEADER_SIZE") = mrdn::kHeaderSize;
  m.attr("MRDN_VERSION") = mrdn::kVersion;
  m.def("mrdn_encode", &encode, nb::arg("tier"), nb::arg("body"),
        "One MRDN v1 frame (32-byte header + body) as bytes. tier: BlockTier or 0..2; body: bytes-like, "
        "at most 4 GiB - 1 bytes (MrdnError status 'oversized_body' otherwise).");
  m.def("mrdn_decode", &decode, nb::arg("buffer"),
        "Decodes the frame at the start of `buffer`: (tier, body, frame_size). Bytes past frame_size are "
        "ignored (the next frame of a batch). Raises MrdnError naming the problem and its byte offset.");
  m.def("mrdn_decode_batch", &decode_batch, nb::arg("buffer"),
        "Decodes frames back to back until `buffer` ends: [(tier, body), ...]. Raises MrdnError at the first "
        "bad frame (offset absolute in `buffer`).");
  m.def("mrdn_checksum", &checksum, nb::arg("data"), "First 16 bytes of BLAKE3(data).");
}

}  // namespace meridian::python
