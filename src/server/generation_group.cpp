#include "server/generation_group.h"

namespace dllm::server {

namespace {
double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

GenerationGroup::GenerationGroup(Engine& engine, Admission& admission, ServerMetrics& metrics)
    : engine_(engine), admission_(admission), channel_(std::make_shared<Channel>(metrics)) {}

GenerationGroup::~GenerationGroup() {
  // Every submitted request is collected from the engine, which otherwise keeps its result.
  cancel();
  for (size_t i = 0; i < ids_.size(); ++i)
    if (!waited_[i]) engine_.wait(ids_[i]);
}

void GenerationGroup::submit(const std::vector<Request>& choices) {
  {
    std::lock_guard lk(channel_->mu);
    channel_->timing.resize(choices.size());
  }
  for (size_t i = 0; i < choices.size(); ++i) {
    {
      std::lock_guard lk(channel_->mu);
      channel_->timing[i].submitted = std::chrono::steady_clock::now();
    }
    uint64_t id;
    try {
      Admission* admission = &admission_;
      id = engine_.submit(choices[i], [ch = channel_, i, admission](const RequestOutput& o) {
        ch->on_output(static_cast<int>(i), o);
        if (o.finished) {
          ch->metrics.request_finished(o.finish_reason);
          admission->finished(o.id);
        }
      });
    } catch (...) {
      admission_.release(static_cast<int64_t>(choices.size() - i));
      cancel();
      throw;
    }
    admission_.submitted(id);
    ids_.push_back(id);
    waited_.push_back(false);
  }
}

void GenerationGroup::Channel::on_output(int choice, const RequestOutput& o) {
  const auto now = std::chrono::steady_clock::now();
  std::unique_lock lk(mu);
  Timing& t = timing[choice];
  if (!o.token_ids.empty()) {
    if (t.first)
      metrics.time_to_first_token(seconds_between(t.submitted, now));
    else
      metrics.inter_block(seconds_between(t.last_block, now));
    t.first = false;
    t.last_block = now;
  }
  if (o.finished) {
    metrics.end_to_end(seconds_between(t.submitted, now));
    ++finished;
  }
  events.push_back({choice, o});
  // Wake the HTTP thread after unlocking, so that it does not wake only to wait for the lock
  // (this runs on the engine thread, once per request per step).
  lk.unlock();
  cv.notify_one();
}

std::optional<GenerationGroup::Event> GenerationGroup::next(std::chrono::milliseconds timeout) {
  Channel& c = *channel_;
  std::unique_lock lk(c.mu);
  if (!c.cv.wait_for(lk, timeout, [&] { return !c.events.empty(); })) return std::nullopt;
  Event e = std::move(c.events.front());
  c.events.pop_front();
  return e;
}

bool GenerationGroup::all_finished() const {
  std::lock_guard lk(channel_->mu);
  return channel_->finished == channel_->timing.size();
}

RequestResult GenerationGroup::result(int choice) {
  waited_[choice] = true;
  return engine_.wait(ids_[choice]);
}

void GenerationGroup::cancel() {
  for (size_t i = 0; i < ids_.size(); ++i)
    if (!waited_[i]) engine_.cancel(ids_[i]);  // false when already finished: fine
}

}  // namespace dllm::server
