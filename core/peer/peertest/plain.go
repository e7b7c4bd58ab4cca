package peertest

import "net"

// ServePlain writes the buffers of data, in order and in writes of 4 MiB,
// to each connection l accepts, then closes it, until l is closed: the
// plain TCP stream (no TLS, no protocol) the benchmarks compare a fetch
// with.
func ServePlain(l net.Listener, data ...[]byte) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			for _, b := range data {
				for off := 0; off < len(b); off += 4 << 20 {
					if _, err := c.Write(b[off:min(len(b), off+4<<20)]); err != nil {
						return
					}
				}
			}
		}()
	}
}
