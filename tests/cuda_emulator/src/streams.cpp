// CUDA emulator: events and created streams (gc_emu/runtime.hpp). A created stream is a queue of
// operations that run, in order, only when something waits for them (or as they are queued:
// GC_EMU_STREAMS below); an event remembers where in
// its stream (or in the deferred-copy sequence of the default stream) it was recorded.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gc_emu/runtime.hpp"
#include "internal.hpp"

struct CUstream_st {
  unsigned magic = 0x7374726d;  // "strm": a live stream
  bool blocking = true;         // synchronizes with the legacy default stream
  bool eager = false;           // runs each operation as it is queued (GC_EMU_STREAMS)
  std::deque<std::function<void()>> queue;
  std::uint64_t queued = 0, done = 0;  // operations ever queued / run
};

struct CUevent_st {
  unsigned magic = 0x6576656e;  // "even": a live event
  std::chrono::steady_clock::time_point recorded{};
  bool was_recorded = false;
  std::uint64_t after_copy = 0;  // the deferred copies up to this one precede the record
  cudaStream_t stream = nullptr;  // recorded on (nullptr: the default stream)
  std::uint64_t position = 0;     // on a created stream: its operations before the record
};

namespace gc::emu {
namespace {

constexpr unsigned kLiveStream = 0x7374726d, kLiveEvent = 0x6576656e;

std::vector<cudaStream_t>& live_streams() {
  static std::vector<cudaStream_t> streams;
  return streams;
}

bool is_live(cudaStream_t s) {
  const auto& all = live_streams();
  return std::find(all.begin(), all.end(), s) != all.end();
}

bool is_live(cudaEvent_t e) { return e != nullptr && e->magic == kLiveEvent; }

// Runs the stream's operations until `position` of them have run.
void run_until(cudaStream_t s, std::uint64_t position) {
  while (s->done < position && !s->queue.empty()) {
    std::function<void()> op = std::move(s->queue.front());
    s->queue.pop_front();
    ++s->done;
    op();
  }
}

void run_all(cudaStream_t s) { run_until(s, s->queued); }

// GC_EMU_STREAMS: when a created stream runs its work. "lazy" (unset): when something waits for
// it (below). "eager": as it is queued, in program order, as a GPU that starts a stream's kernel
// at once would. "mixed": eager on even MPI ranks, lazy on odd ones. "random:SEED": each stream
// eager or lazy, drawn from SEED, the rank and the stream's creation count. The rank is Open
// MPI's OMPI_COMM_WORLD_RANK (or Slurm's PMI_RANK). The last two make the ranks of one job run
// their streams' work in different orders, as GPUs may (issue 41, hazard 3).
bool next_stream_is_eager() {
  static const std::string mode = [] {
    const char* m = std::getenv("GC_EMU_STREAMS");
    return std::string(m != nullptr && *m != '\0' ? m : "lazy");
  }();
  static std::uint64_t created = 0;
  ++created;
  const char* rank_text = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank_text == nullptr) rank_text = std::getenv("PMI_RANK");
  const std::uint64_t rank = rank_text != nullptr ? std::uint64_t(std::atoll(rank_text)) : 0;
  if (mode == "lazy") return false;
  if (mode == "eager") return true;
  if (mode == "mixed") return rank % 2 == 0;
  if (mode.rfind("random:", 0) != 0) {
    std::fprintf(stderr, "cuda emulator: GC_EMU_STREAMS=%s is not lazy, eager, mixed or random:SEED\n",
                 mode.c_str());
    std::abort();
  }
  std::uint64_t h = std::strtoull(mode.c_str() + 7, nullptr, 10) * 0x9e3779b97f4a7c15ull;
  for (std::uint64_t v : {rank, created}) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 31)) * 0xbf58476d1ce4e5b9ull;
  }
  return (h >> 29) % 2 == 1;
}

cudaError_t bad_stream(const char* call) {
  return record_error(cudaErrorInvalidResourceHandle, std::string(call) + ": not a live stream");
}

cudaError_t bad_event(const char* call) {
  return record_error(cudaErrorInvalidResourceHandle, std::string(call) + ": not a live event");
}

// Everything queued before the event's record has run.
void complete_up_to(cudaEvent_t e) {
  if (e->stream != nullptr && is_live(e->stream)) {
    run_until(e->stream, e->position);
  } else {
    run_pending_copies_until(e->after_copy);
  }
}

}  // namespace

void drain_all_streams() {
  for (cudaStream_t s : live_streams()) run_all(s);
}

void drain_blocking_streams() {
  for (cudaStream_t s : live_streams()) {
    if (s->blocking) run_all(s);
  }
}

cudaError_t enqueue(cudaStream_t stream, std::function<void()> op) {
  if (stream == nullptr) {
    run_pending_copies();
    op();
    return cudaSuccess;
  }
  if (!is_live(stream)) return bad_stream("enqueue");
  stream->queue.push_back(std::move(op));
  ++stream->queued;
  if (stream->eager) run_all(stream);
  return cudaSuccess;
}

}  // namespace gc::emu

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  *stream = new CUstream_st;
  (*stream)->blocking = (flags & cudaStreamNonBlocking) == 0;
  (*stream)->eager = gc::emu::next_stream_is_eager();
  gc::emu::live_streams().push_back(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!gc::emu::is_live(stream)) return gc::emu::bad_stream("cudaStreamDestroy");
  gc::emu::run_all(stream);  // destroying does not cancel queued work
  auto& all = gc::emu::live_streams();
  all.erase(std::find(all.begin(), all.end(), stream));
  stream->magic = 0;
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  if (stream != nullptr && !gc::emu::is_live(stream)) return gc::emu::bad_stream("cudaStreamWaitEvent");
  if (!gc::emu::is_live(event)) return gc::emu::bad_event("cudaStreamWaitEvent");
  // The waiting stream's later work runs after the event's: running the event's stream now is
  // at least as late as that (the default stream runs everything at once anyway).
  gc::emu::complete_up_to(event);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  gc::emu::count_host_wait();
  if (stream == nullptr) {
    gc::emu::run_pending_copies();
    return cudaSuccess;
  }
  if (!gc::emu::is_live(stream)) return gc::emu::bad_stream("cudaStreamSynchronize");
  gc::emu::run_all(stream);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  gc::emu::count_host_wait();
  for (cudaStream_t s : gc::emu::live_streams()) gc::emu::run_all(s);
  gc::emu::run_pending_copies();
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!gc::emu::is_live(event)) return gc::emu::bad_event("cudaEventDestroy");
  event->magic = 0;
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!gc::emu::is_live(event)) return gc::emu::bad_event("cudaEventRecord");
  if (stream != nullptr && !gc::emu::is_live(stream)) return gc::emu::bad_stream("cudaEventRecord");
  event->recorded = std::chrono::steady_clock::now();
  event->was_recorded = true;
  event->after_copy = gc::emu::last_queued_sequence();
  event->stream = stream;
  event->position = stream != nullptr ? stream->queued : 0;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!gc::emu::is_live(event)) return gc::emu::bad_event("cudaEventSynchronize");
  gc::emu::complete_up_to(event);
  return cudaSuccess;
}

// Milliseconds of host time between the two records.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
  if (!gc::emu::is_live(start) || !gc::emu::is_live(stop) || !start->was_recorded || !stop->was_recorded) {
    return gc::emu::record_error(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: not two recorded events");
  }
  *ms = std::chrono::duration<float, std::milli>(stop->recorded - start->recorded).count();
  return cudaSuccess;
}
