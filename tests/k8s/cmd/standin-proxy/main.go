// standin-proxy: the cluster tests' stand-in for istio-proxy. It listens on 15001 (outbound) and 15006
// (inbound), and answers each accepted connection with one line "PORT ORIGINAL-DESTINATION" — the listener
// it arrived on and the address SO_ORIGINAL_DST gives (where the app meant to go before the nat table's
// REDIRECT) — then closes it. It also logs that line on stdout, so `kubectl logs` shows every connection.
// Redirection is thus shown by traffic: a connection that was not redirected never reaches it.
package main

import (
	"fmt"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// origDst reads SO_ORIGINAL_DST (IPv4: a sockaddr_in) from the accepted socket.
func origDst(c *net.TCPConn) (string, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return "", err
	}
	var addr syscall.RawSockaddrInet4
	var serr error
	err = raw.Control(func(fd uintptr) {
		size := uint32(unsafe.Sizeof(addr))
		// SO_ORIGINAL_DST = 80 at level SOL_IP; getsockopt writes at most size bytes into addr, which
		// lives until the call returns.
		_, _, errno := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.SOL_IP, 80,
			uintptr(unsafe.Pointer(&addr)), uintptr(unsafe.Pointer(&size)), 0)
		if errno != 0 {
			serr = errno
		}
	})
	if err != nil {
		return "", err
	}
	if serr != nil {
		return "", serr
	}
	port := int(addr.Port>>8) | int(addr.Port&0xff)<<8
	return fmt.Sprintf("%d.%d.%d.%d:%d", addr.Addr[0], addr.Addr[1], addr.Addr[2], addr.Addr[3], port), nil
}

func serve(port string) {
	ln, err := net.Listen("tcp4", ":"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			continue
		}
		go func(c *net.TCPConn) {
			defer c.Close()
			dst, err := origDst(c)
			if err != nil {
				dst = "none(" + err.Error() + ")"
			}
			line := fmt.Sprintf("%s %s from %s", port, dst, c.RemoteAddr())
			fmt.Println(line)
			fmt.Fprintln(c, line)
		}(c.(*net.TCPConn))
	}
}

func main() {
	go serve("15006")
	serve("15001")
}
