// The flight recorder's ring (flight_recorder.h).
#include "core/run/flight_recorder.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

#include "tdaot/errors.h"

// GCC warns that ThreadSanitizer does not model fences; dump_fd's orders the kernel's copy,
// which TSan does not see either (every access TSan sees is an atomic without fences).
#if defined(__SANITIZE_THREAD__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Wtsan"
#endif

namespace tdaot::detail {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the flight log is little-endian");
static_assert(__atomic_always_lock_free(sizeof(uint64_t), nullptr),
              "the recorder's seqlock needs lock-free 64-bit atomics (async-signal-safe dump_fd)");

// A slot's data words are release stores, read by acquire loads: a reader that loads any word of
// a new step also sees that step's seq, stored before them (plain moves on x86-64).
void store_word(uint64_t* at, uint64_t value) noexcept { __atomic_store_n(at, value, __ATOMIC_RELEASE); }

uint64_t bits_of(double value) noexcept {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// Writes `bytes` bytes of `data` to fd, through partial writes and EINTR; 0 or the errno.
int write_all(int fd, const void* data, size_t bytes) noexcept {
  const char* at = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, at, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;  // no progress: never loop on it
    at += n;
    bytes -= static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

FlightRecorder::FlightRecorder(FlightInfo info, std::vector<RecordedBuffer> inputs,
                               std::vector<RecordedBuffer> outputs)
    : capacity_(info.capacity),
      batch_(info.batch),
      inputs_(std::move(inputs)),
      outputs_(std::move(outputs)),
      bound_at_(std::chrono::steady_clock::now()) {
  info.bound_at_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  layout_ = flight_layout(info, inputs_, outputs_);
  const size_t words = static_cast<size_t>(capacity_) * (layout_.step_bytes / 8);
  ring_.reset(new (std::nothrow) uint64_t[words]());
  if (!ring_) {
    throw InvalidArgumentError("BindOptions::record = " + std::to_string(capacity_) + ": the ring of " +
                               std::to_string(words * 8) + " bytes cannot be allocated");
  }
  pending_reset_.assign((static_cast<size_t>(batch_) + 7) / 8 * 8, 0);
}

uint64_t* FlightRecorder::slot(uint64_t seq) const noexcept {
  const uint64_t index = (seq - 1) % static_cast<uint64_t>(capacity_);
  return ring_.get() + index * (layout_.step_bytes / 8);
}

// Word by word, each an atomic store: a reader may be copying the same slot.
void FlightRecorder::store(uint64_t* at, size_t offset, const void* data, size_t bytes) noexcept {
  uint64_t* word = at + offset / 8;
  const char* from = static_cast<const char*>(data);
  for (; bytes >= 8; bytes -= 8, from += 8) {
    uint64_t value;
    std::memcpy(&value, from, 8);
    store_word(word++, value);
  }
  if (bytes > 0) {
    uint64_t value = 0;
    std::memcpy(&value, from, bytes);
    store_word(word, value);
  }
}

void FlightRecorder::store_buffers(const std::vector<RecordedBuffer>& buffers,
                                   const std::vector<size_t>& offsets, bool copy) noexcept {
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (copy) {
      store(open_, offsets[i], buffers[i].data, buffers[i].bytes);
      continue;
    }
    uint64_t* word = open_ + offsets[i] / 8;
    for (size_t w = 0; w < (buffers[i].bytes + 7) / 8; ++w) store_word(word + w, 0);
  }
}

void FlightRecorder::mark_reset(const std::vector<bool>* rows) noexcept {
  for (int64_t row = 0; row < batch_; ++row) {
    if (rows == nullptr || (*rows)[static_cast<size_t>(row)]) pending_reset_[static_cast<size_t>(row)] = 1;
  }
}

int64_t FlightRecorder::now_ns() const noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - bound_at_)
      .count();
}

void FlightRecorder::begin(int64_t start_ns, uint64_t weights, bool buffers) noexcept {
  const uint64_t seq = ++seq_;
  open_ = slot(seq);
  __atomic_store_n(open_ + FlightLayout::kSeq / 8, seq, __ATOMIC_RELAXED);  // ordered by the data's
  store_word(open_ + FlightLayout::kStart / 8, static_cast<uint64_t>(start_ns));
  store_word(open_ + layout_.weights / 8, weights);
  store(open_, FlightLayout::kReset, pending_reset_.data(), pending_reset_.size());
  std::memset(pending_reset_.data(), 0, pending_reset_.size());
  store_buffers(inputs_, layout_.inputs, buffers);
}

void FlightRecorder::supervisor(int64_t row, const SupervisorState& state) noexcept {
  uint64_t* at = open_ + (layout_.supervisor + static_cast<size_t>(row) * FlightLayout::kSupervisorRowBytes) / 8;
  store_word(at, static_cast<uint32_t>(state.mode));  // mode:int32, then pad:int32 0
  store_word(at + 1, bits_of(state.gain_scale));
  store_word(at + 2, bits_of(state.damping_scale));
  store_word(at + 3, bits_of(state.blend));
  store_word(at + 4, static_cast<uint64_t>(state.steps));
}

void FlightRecorder::end(int64_t duration_ns, uint32_t flags, const Interventions& counts,
                         bool buffers) noexcept {
  store_buffers(outputs_, layout_.outputs, buffers);
  store_word(open_ + FlightLayout::kDuration / 8, static_cast<uint64_t>(duration_ns));
  store_word(open_ + FlightLayout::kFlags / 8, flags);
  const int64_t values[5] = {counts.nonfinite, counts.rate_limited, counts.blended, counts.clipped,
                             counts.fallback};
  store(open_, FlightLayout::kInterventions, values, sizeof values);
  __atomic_store_n(open_ + layout_.seq_end / 8, seq_, __ATOMIC_RELEASE);
  open_ = nullptr;
}

std::string FlightRecorder::snapshot() const {
  const size_t step_words = layout_.step_bytes / 8;
  const size_t end_word = layout_.seq_end / 8;
  std::string out = layout_.header;
  const size_t data_offset = out.size();
  out.resize(data_offset + static_cast<size_t>(capacity_) * layout_.step_bytes);
  char* to = out.data() + data_offset;
  for (int64_t s = 0; s < capacity_; ++s, to += layout_.step_bytes) {
    const uint64_t* from = ring_.get() + static_cast<size_t>(s) * step_words;
    const uint64_t last = __atomic_load_n(from + end_word, __ATOMIC_ACQUIRE);
    for (size_t w = 1; w < end_word; ++w) {
      const uint64_t value = __atomic_load_n(from + w, __ATOMIC_ACQUIRE);
      std::memcpy(to + w * 8, &value, 8);
    }
    // After the data's acquire loads: a copy holding any word of a newer step sees its seq.
    const uint64_t first = __atomic_load_n(from, __ATOMIC_RELAXED);
    const uint64_t whole = first == last ? last : 0;
    std::memcpy(to, &first, 8);
    std::memcpy(to + layout_.seq_end, &whole, 8);
  }
  return out;
}

int FlightRecorder::dump_fd(int fd) const noexcept {
  const int saved = errno;
  const size_t step_words = layout_.step_bytes / 8;
  const size_t end_word = layout_.seq_end / 8;
  int error = write_all(fd, layout_.header.data(), layout_.header.size());
  for (int64_t s = 0; s < capacity_ && error == 0; ++s) {
    const uint64_t* from = ring_.get() + static_cast<size_t>(s) * step_words;
    const uint64_t last = __atomic_load_n(from + end_word, __ATOMIC_ACQUIRE);
    error = write_all(fd, from, layout_.seq_end);  // seq and the data, copied by the kernel
    // The kernel's loads are no C++ atomics: a fence keeps them before seq's (dmb ishld on
    // AArch64; x86-64 does not reorder loads with older loads).
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    const uint64_t first = __atomic_load_n(from, __ATOMIC_RELAXED);
    // seq_end as the kernel's copy of seq should read: the slot's, or 0 when it changed under it.
    const uint64_t whole = first == last ? last : 0;
    if (error == 0) error = write_all(fd, &whole, sizeof whole);
  }
  errno = saved;
  return error;
}

void FlightRecorder::dump(const std::string& path) const {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int error = fd < 0 ? errno : dump_fd(fd);
  if (fd >= 0 && ::close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    throw Error("cannot write the flight log to '" + path + "': " + std::strerror(error));
  }
}

}  // namespace tdaot::detail
