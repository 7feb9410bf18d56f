package localrabbit

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
)

// User is a broker user made for one test on a private node, deleted when
// the test ends.
type User struct {
	Name, Password string
	node           *Node
}

// AddUser creates a user named name with a random password and the given
// permissions (rabbitmqctl set_permissions' configure, write and read
// expressions) on the node's default vhost.
func (n *Node) AddUser(t testing.TB, name, configure, write, read string) *User {
	t.Helper()
	ctx := context.Background()
	u := &User{Name: name, Password: rand.Text(), node: n}
	if err := n.Ctl(ctx, "add_user", u.Name, u.Password); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Ctl(context.Background(), "delete_user", u.Name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := n.Ctl(ctx, "set_permissions", "-p", "/", u.Name, configure, write, read); err != nil {
		t.Fatal(err)
	}
	return u
}

// URL is the user's AMQP URL.
func (u *User) URL() string {
	return fmt.Sprintf("amqp://%s:%s@127.0.0.1:%d/", u.Name, u.Password, u.node.Port)
}

// LockOut changes the user's password, so the broker refuses its next
// login, and closes its connections, so its clients must log in again:
// a password rotated under running services, or an auth backend refusing
// for a while. LetIn undoes it.
func (u *User) LockOut(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	if err := u.node.Ctl(ctx, "change_password", u.Name, "locked-out-"+u.Password); err != nil {
		t.Fatal(err)
	}
	out, err := u.node.CtlOutput(ctx, "list_connections", "-q", "--no-table-headers", "user", "pid")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(out) {
		if fields := strings.Fields(line); len(fields) == 2 && fields[0] == u.Name {
			if err := u.node.Ctl(ctx, "close_connection", fields[1], "test: locked out"); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// LetIn gives the user its password back.
func (u *User) LetIn(t testing.TB) {
	t.Helper()
	if err := u.node.Ctl(context.Background(), "change_password", u.Name, u.Password); err != nil {
		t.Fatal(err)
	}
}
