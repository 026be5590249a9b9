package esp

// SetTestIV makes every packet sa seals carry iv, so that known-answer tests
// can reproduce published packets. Never for production use: it breaks IV
// uniqueness.
func SetTestIV(sa *SA, iv []byte) { sa.testIV = append([]byte(nil), iv...) }
