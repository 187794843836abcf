// testapp: the cluster tests' application container. "serve PORT" answers every connection with the
// pod's name (HOSTNAME) and closes; "connect HOST:PORT" dials once and prints what it read; "sleep" waits
// for SIGTERM. Static (CGO_ENABLED=0), so its image is this one file.
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testapp serve PORT | connect HOST:PORT | sleep")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		ln, err := net.Listen("tcp", ":"+os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		host, _ := os.Hostname()
		for {
			c, err := ln.Accept()
			if err != nil {
				continue
			}
			fmt.Fprintf(c, "%s\n", host)
			c.Close()
		}
	case "connect":
		c, err := net.DialTimeout("tcp", os.Args[2], 5*time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(c)
		os.Stdout.Write(b)
	case "sleep":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		<-ch
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
}
