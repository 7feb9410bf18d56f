package console

import (
	"container/list"
	"sync"
	"time"
)

// store keeps the latest values put in it under ids, at most max of them
// and none older than ttl: the plans waiting for a confirmation, the
// outcomes of actions, which a reload must not run again, the login
// sessions, and the signatures of the groups shown.
type store[T any] struct {
	mu    sync.Mutex
	max   int
	ttl   time.Duration
	now   func() time.Time // time.Now; a test moves it on
	items map[string]*list.Element
	order *list.List // of *stored[T], least recently put first
}

type stored[T any] struct {
	id      string
	v       T
	expires time.Time
}

func newStore[T any](max int, ttl time.Duration) *store[T] {
	return &store[T]{max: max, ttl: ttl, now: time.Now, items: map[string]*list.Element{}, order: list.New()}
}

// put stores v and returns its new, random id.
func (s *store[T]) put(v T) string {
	id := randomString()
	s.putAt(id, v)
	return id
}

// putAt stores v under id, replacing what id held, for another ttl; the
// least recently put are dropped beyond max.
func (s *store[T]) putAt(id string, v T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.items[id]; ok {
		s.order.Remove(e)
	}
	s.items[id] = s.order.PushBack(&stored[T]{id, v, s.now().Add(s.ttl)})
	for s.order.Len() > s.max {
		oldest := s.order.Front()
		delete(s.items, s.order.Remove(oldest).(*stored[T]).id)
	}
}

func (s *store[T]) get(id string) (T, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live(id)
}

// take removes and returns the value stored under id: a plan runs once,
// a session ends at its logout.
func (s *store[T]) take(id string) (T, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.live(id)
	if e, found := s.items[id]; found {
		s.order.Remove(e)
		delete(s.items, id)
	}
	return v, ok
}

// live is the value under id if it has not expired. Called with mu held.
func (s *store[T]) live(id string) (T, bool) {
	e, ok := s.items[id]
	if !ok || s.now().After(e.Value.(*stored[T]).expires) {
		var zero T
		return zero, false
	}
	return e.Value.(*stored[T]).v, true
}
