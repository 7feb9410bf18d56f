package testenv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
)

// UnusedPorts returns n distinct TCP ports on 127.0.0.1 that nothing
// listens on, for a server a test starts that must be told its port. They
// come from below the kernel's ephemeral range: a port the kernel hands
// out for ":0" lies inside it, where any outgoing connection may take it
// between the check and the server's bind (a private RabbitMQ node once
// failed to start so), while below it only a server binding that very
// port can.
func UnusedPorts(n int) ([]int, error) {
	low := ephemeralLow()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			return nil, errors.New("testenv: no unused port below the ephemeral range")
		}
		p := 10000 + rand.IntN(low-10000)
		if slices.Contains(ports, p) {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		ports = append(ports, p)
	}
	return ports, nil
}

// ephemeralLow is the lowest port of the kernel's ephemeral range
// (Linux's default, 32768, where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if low, err := strconv.Atoi(f[0]); err == nil && low > 11000 {
				return low
			}
		}
	}
	return 32768
}
