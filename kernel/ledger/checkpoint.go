package ledger

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// Checkpoint is a C2SP tlog-checkpoint body: the origin, the tree size and
// its root hash.
type Checkpoint struct {
	Origin string
	Size   int64
	Root   Hash
}

// Body is the checkpoint's note text: the three lines, each ending in a
// newline. (tlog.FormatTree writes the go.sum header instead.)
func (c Checkpoint) Body() []byte {
	b := make([]byte, 0, len(c.Origin)+64)
	b = append(b, c.Origin...)
	b = append(b, '\n')
	b = strconv.AppendInt(b, c.Size, 10)
	b = append(b, '\n')
	b = base64.StdEncoding.AppendEncode(b, c.Root[:])
	return append(b, '\n')
}

// ParseCheckpoint reads a checkpoint body, accepting only the canonical
// form Body writes: exactly three lines, a decimal size without sign or
// leading zeros, a root in padded standard base64 of 32 bytes.
func ParseCheckpoint(text []byte) (Checkpoint, error) {
	lines := strings.Split(string(text), "\n")
	if len(lines) != 4 || lines[3] != "" {
		return Checkpoint{}, errors.New("checkpoint: want exactly three lines (origin, size, root hash), each ending in a newline")
	}
	origin, sizeText, rootText := lines[0], lines[1], lines[2]
	if origin == "" {
		return Checkpoint{}, errors.New("checkpoint: the origin line is empty")
	}
	size, err := strconv.ParseInt(sizeText, 10, 64)
	if err != nil || size < 0 || strconv.FormatInt(size, 10) != sizeText {
		return Checkpoint{}, errors.New("checkpoint: the size line " + strconv.Quote(sizeText) + " is not a canonical decimal tree size")
	}
	root, err := decodeHash(rootText)
	if err != nil {
		return Checkpoint{}, errors.New("checkpoint: the root hash " + err.Error())
	}
	return Checkpoint{Origin: origin, Size: size, Root: root}, nil
}

// decodeHash decodes a base64 hash, refusing any spelling but the
// canonical one.
func decodeHash(s string) (Hash, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != len(Hash{}) {
		return Hash{}, errors.New(strconv.Quote(s) + " is not a base64 SHA-256 hash")
	}
	if base64.StdEncoding.EncodeToString(b) != s {
		return Hash{}, errors.New(strconv.Quote(s) + " is not canonical base64")
	}
	return Hash(b), nil
}

// decodeBase64 decodes standard padded base64, refusing any spelling but
// the canonical one.
func decodeBase64(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("is not base64")
	}
	if base64.StdEncoding.EncodeToString(b) != s {
		return nil, errors.New("is not canonical base64")
	}
	return b, nil
}

// GenerateKey makes an Ed25519 signing key named origin from rand, and its
// verifier key (name+hash+base64), in sumdb/note's text forms.
func GenerateKey(rand io.Reader, origin string) (signer, verifier string, err error) {
	return note.GenerateKey(rand, origin)
}

// VerifierOf is the verifier key of a signing key.
func VerifierOf(signer string) (string, error) {
	s, err := note.NewSigner(signer)
	if err != nil {
		return "", errors.New("the signing key is malformed")
	}
	// The signer key is PRIVATE+KEY+name+hash+key; the verifier key is the
	// same name and hash with the public half.
	parts := strings.SplitN(signer, "+", 5)
	key, err := base64.StdEncoding.DecodeString(parts[4])
	if err != nil || len(key) != 1+32 || key[0] != 1 {
		return "", errors.New("the signing key is not an Ed25519 key")
	}
	pub := ed25519Public(key[1:])
	v, err := note.NewEd25519VerifierKey(s.Name(), pub)
	if err != nil {
		return "", err
	}
	return v, nil
}

// Sign signs a checkpoint with signer, whose name must be the origin.
func Sign(c Checkpoint, signer string) ([]byte, error) {
	s, err := note.NewSigner(signer)
	if err != nil {
		return nil, errors.New("the signing key is malformed")
	}
	if s.Name() != c.Origin {
		return nil, errors.New("the signing key is named " + strconv.Quote(s.Name()) + ", not the origin " + strconv.Quote(c.Origin))
	}
	return note.Sign(&note.Note{Text: string(c.Body())}, s)
}

// Open checks a signed checkpoint against verifier and returns it. It
// accepts only what Sign writes: the three-line body, one blank line and
// exactly one signature, by that key, whose name is the origin, in
// canonical base64.
func Open(signed []byte, verifier string) (Checkpoint, error) {
	v, err := note.NewVerifier(verifier)
	if err != nil {
		return Checkpoint{}, errors.New("the verifier key is malformed (want name+hash+base64)")
	}
	n, err := note.Open(signed, note.VerifierList(v))
	if err != nil {
		var unverified *note.UnverifiedNoteError
		var invalid *note.InvalidSignatureError
		switch {
		case errors.As(err, &unverified):
			return Checkpoint{}, errors.New("checkpoint signature: no signature by the verifier key " + v.Name() + "+" + hash8(v.KeyHash()))
		case errors.As(err, &invalid):
			return Checkpoint{}, errors.New("checkpoint signature: the signature by " + v.Name() + " does not verify")
		}
		return Checkpoint{}, errors.New("checkpoint: malformed signed note")
	}
	if len(n.Sigs) != 1 || len(n.UnverifiedSigs) != 0 || bytes.Count(signed[len(n.Text):], []byte("\n")) != 2 {
		return Checkpoint{}, errors.New("checkpoint signature: want exactly one signature line")
	}
	sig := n.Sigs[0]
	if _, err := decodeBase64(sig.Base64); err != nil {
		return Checkpoint{}, errors.New("checkpoint signature " + err.Error())
	}
	var want bytes.Buffer
	want.WriteString(n.Text)
	want.WriteString("\n\u2014 ")
	want.WriteString(sig.Name)
	want.WriteByte(' ')
	want.WriteString(sig.Base64)
	want.WriteByte('\n')
	if !bytes.Equal(want.Bytes(), signed) {
		return Checkpoint{}, errors.New("checkpoint: the signed note is not in canonical form")
	}
	c, err := ParseCheckpoint([]byte(n.Text))
	if err != nil {
		return Checkpoint{}, err
	}
	if c.Origin != v.Name() {
		return Checkpoint{}, errors.New("checkpoint: the origin " + strconv.Quote(c.Origin) + " is not the verifier key's name " + strconv.Quote(v.Name()))
	}
	return c, nil
}

func hash8(h uint32) string {
	s := strconv.FormatUint(uint64(h), 16)
	return strings.Repeat("0", 8-len(s)) + s
}
