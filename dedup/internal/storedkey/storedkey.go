package storedkey

import (
	"crypto/sha256"
	"encoding/hex"
)

// MaxLen is the longest key stored as itself. It keeps a Postgres btree
// entry well under its limit of about 2.7 kB and a Redis key small, while
// leaving the keys of ordinary event IDs (UUIDs, ULIDs, "<source>:<id>")
// readable in the store.
const MaxLen = 512

// digestPrefix marks a key stored as its digest. A caller could send a key
// that looks like a digest itself; it would then share a stored key with
// the key whose digest it is, which needs a SHA-256 preimage to aim at
// another event, and only makes the two duplicates of each other.
const digestPrefix = "sha256:"

// Bounded is the key stored for key: key itself when it is at most MaxLen
// bytes — so keys written before long keys were hashed keep their form,
// and the data already in a store stays valid — and otherwise its Digest,
// of fixed length (len(digestPrefix)+64 bytes).
func Bounded(key string) string {
	if len(key) <= MaxLen {
		return key
	}
	return Digest(key)
}

// Digest is "sha256:" followed by the hex SHA-256 of key: a fixed-length
// stand-in for a key a store cannot or should not keep as it is.
func Digest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return digestPrefix + hex.EncodeToString(sum[:])
}
