package localrabbit

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"testing"
)

// User is a broker user made for one test on a private node, deleted when
// the test ends.
type User struct {
	Name, Password string
	node           *Node
}

// actingUser is who the node's audit events name for the changes below,
// where rabbitmqctl names "rmq-cli".
const actingUser = "warren-localrabbit"

// AddUser creates a user named name with a random password and the given
// permissions (rabbitmqctl set_permissions' configure, write and read
// expressions) on the node's default vhost.
func (n *Node) AddUser(t testing.TB, name, configure, write, read string) *User {
	t.Helper()
	u := &User{Name: name, Password: rand.Text(), node: n}
	if err := n.evalExpect(context.Background(), "ok", fmt.Sprintf("rabbit_auth_backend_internal:add_user(%s, %s, %s).",
		erlBinary(u.Name), erlBinary(u.Password), erlBinary(actingUser))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.evalExpect(context.Background(), "ok", fmt.Sprintf("rabbit_auth_backend_internal:delete_user(%s, %s).",
			erlBinary(u.Name), erlBinary(actingUser))); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := n.evalExpect(context.Background(), "ok", fmt.Sprintf("rabbit_auth_backend_internal:set_permissions(%s, <<\"/\">>, %s, %s, %s, %s).",
		erlBinary(u.Name), erlBinary(configure), erlBinary(write), erlBinary(read), erlBinary(actingUser))); err != nil {
		t.Fatal(err)
	}
	return u
}

// URL is the user's AMQP URL.
func (u *User) URL() string {
	return (&url.URL{Scheme: "amqp", User: url.UserPassword(u.Name, u.Password), Host: fmt.Sprintf("127.0.0.1:%d", u.node.Port), Path: "/"}).String()
}

// LockOut changes the user's password, so the broker refuses its next
// login, and closes its connections, so its clients must log in again:
// a password rotated under running services, or an auth backend refusing
// for a while. LetIn undoes it.
func (u *User) LockOut(t testing.TB) {
	t.Helper()
	u.setPassword(t, "locked-out-"+u.Password)
	// Every connection of the user, whichever node of a cluster holds it;
	// one that closes meanwhile is skipped.
	closeAll := fmt.Sprintf(`Name = %s,
		Mine = [P || P <- rabbit_networking:connections(),
			(catch rabbit_networking:connection_info(P, [user])) =:= [{user, Name}]],
		[rabbit_networking:close_connection(P, "test: locked out") || P <- Mine],
		ok.`, erlBinary(u.Name))
	if err := u.node.evalExpect(context.Background(), "ok", closeAll); err != nil {
		t.Fatal(err)
	}
}

// LetIn gives the user its password back.
func (u *User) LetIn(t testing.TB) {
	t.Helper()
	u.setPassword(t, u.Password)
}

func (u *User) setPassword(t testing.TB, password string) {
	t.Helper()
	if err := u.node.evalExpect(context.Background(), "ok", fmt.Sprintf("rabbit_auth_backend_internal:change_password(%s, %s, %s).",
		erlBinary(u.Name), erlBinary(password), erlBinary(actingUser))); err != nil {
		t.Fatal(err)
	}
}
