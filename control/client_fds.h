// What vrnicd accepts as a descriptor from a client: the client's /proc/<pid>/mem, an event
// channel of its own making, and the client end of a session's socket (ibv_import_device). A descriptor a client hands over is shared with it (one
// file description), so vrnicd takes only kinds whose use the client cannot turn against it.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace vrnic {

// A procfs file named mem in a directory named by a number (any mount of procfs).
bool is_proc_mem(int fd);
// A dup of fd if it is an event channel (ctl::make_event_channel) that a process of `uid`
// made: an AF_UNIX SOCK_SEQPACKET socket whose peer credentials are that user's. Anything
// else (a pipe, whose O_NONBLOCK the client controls; a socket connected to some service,
// which would get vrnicd's credentials) is refused. The new fd, or -EINVAL / -errno.
int take_event_channel(int fd, uid_t uid);
// The inode of the socket that fd, an AF_UNIX socket, is connected to (as the kernel's
// sock_diag reports it: the other end's, whoever holds it), or 0 if it is none.
uint64_t unix_peer_inode(int fd);
// The inode of a socket vrnicd holds (the server end of a session), or 0.
uint64_t socket_inode(int fd);

}  // namespace vrnic
