#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "internal.h"

namespace vrnic::provider {

DaemonConnection::~DaemonConnection() {
  if (sock_ >= 0) ::close(sock_);
  if (mu_) {
    pthread_mutex_destroy(mu_);
    ::munmap(mu_, sizeof(pthread_mutex_t));
  }
}

int DaemonConnection::open(const char *path) {
  void *page = ::mmap(nullptr, sizeof(pthread_mutex_t), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return ENOMEM;
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  mu_ = static_cast<pthread_mutex_t *>(page);
  pthread_mutex_init(mu_, &attr);
  pthread_mutexattr_destroy(&attr);
  int s = ctl::connect_daemon(path);
  if (s < 0) return -s;
  sock_ = s;
  return 0;
}

int DaemonConnection::call(ctl::Op op, const void *req, size_t req_len, void *resp, size_t resp_len,
                           const int *fds, size_t nfds, std::vector<int> *resp_fds) {
  // A process that died holding it (mid-call) leaves the lock consistent again; its reply,
  // if one is left unread, is not this call's, and the op check below says so.
  if (pthread_mutex_lock(mu_) == EOWNERDEAD) pthread_mutex_consistent(mu_);
  struct Unlock {
    pthread_mutex_t *mu;
    ~Unlock() { pthread_mutex_unlock(mu); }
  } unlock{mu_};
  if (dead_) return EIO;
  int err = ctl::send_message(sock_, op, 0, req, req_len, fds, nfds);
  auto m = std::make_unique<ctl::Message>();
  if (!err) err = ctl::recv_message(sock_, m.get());
  if (err) {
    // The daemon is gone (or speaks nonsense): every later call fails too.
    dead_ = true;
    return EIO;
  }
  if (m->header.op != uint16_t(op)) {
    m->close_fds();
    return EPROTO;
  }
  if (m->header.status) {
    m->close_fds();
    return m->header.status;
  }
  if (m->header.length < resp_len) {
    m->close_fds();
    return EPROTO;
  }
  if (resp_len) std::memcpy(resp, m->body, resp_len);
  if (resp_fds) {
    *resp_fds = std::move(m->fds);
  } else {
    m->close_fds();
  }
  return 0;
}

void *Context::mmap_shared(int fd, size_t len) {
  void *p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}

uint8_t *Context::ring_chunk(uint32_t chunk, size_t bytes, int fd) {
  std::lock_guard lock(ring_chunks_mu);
  if (chunk > shm::kMaxQpsPerSession) return nullptr;  // more chunks than QPs: not vrnicd's
  if (chunk >= ring_chunks.size()) ring_chunks.resize(chunk + 1, {nullptr, 0});
  auto &[map, len] = ring_chunks[chunk];
  if (!map) {
    map = mmap_shared(fd, bytes);
    len = map ? bytes : 0;
  }
  return len == bytes ? static_cast<uint8_t *>(map) : nullptr;
}

void Context::close_fd(int fd) {
  ::close(fd);
}

void Context::ring_doorbell(uint32_t worker, uint32_t qp_handle) {
  session_shm->doorbells[worker].push(qp_handle);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (daemon_shm->workers[worker].sleeping.load(std::memory_order_relaxed)) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd, &one, sizeof(one));
  }
}

}  // namespace vrnic::provider
