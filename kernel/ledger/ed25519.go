package ledger

import "crypto/ed25519"

// ed25519Public is the public key of an Ed25519 seed.
func ed25519Public(seed []byte) ed25519.PublicKey {
	return ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
}
