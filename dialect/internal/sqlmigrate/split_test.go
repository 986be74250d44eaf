package sqlmigrate

import (
	"slices"
	"testing"
)

// Statements end at lines ending in ';', except inside a $$-quoted body.
func TestSplit(t *testing.T) {
	body := []byte(`-- a comment
CREATE TABLE t (id int);

CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    n int;
BEGIN
    -- inside
    SELECT 1 INTO n;
    RETURN n;
END
$$;
SELECT f()`)
	want := []string{
		"CREATE TABLE t (id int)",
		"CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$\nDECLARE\nn int;\nBEGIN\nSELECT 1 INTO n;\nRETURN n;\nEND\n$$",
		"SELECT f()",
	}
	if got := Split(body); !slices.Equal(got, want) {
		t.Fatalf("Split:\n%q\nwant\n%q", got, want)
	}
}
