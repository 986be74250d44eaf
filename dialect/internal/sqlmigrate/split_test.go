package sqlmigrate

import (
	"slices"
	"testing"
)

// Statements end at lines ending in ';', except inside a $$-quoted body
// or a MySQL routine's unindented BEGIN ... END; body.
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
CREATE PROCEDURE p(IN n INT)
MODIFIES SQL DATA
BEGIN
    DECLARE m INT;
    IF n IS NULL THEN
        SET m = 1;
    END IF;
    SELECT m;
END;
BEGIN;
SELECT f()`)
	want := []string{
		"CREATE TABLE t (id int)",
		"CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$\nDECLARE\nn int;\nBEGIN\nSELECT 1 INTO n;\nRETURN n;\nEND\n$$",
		"CREATE PROCEDURE p(IN n INT)\nMODIFIES SQL DATA\nBEGIN\nDECLARE m INT;\nIF n IS NULL THEN\nSET m = 1;\nEND IF;\nSELECT m;\nEND",
		"BEGIN",
		"SELECT f()",
	}
	if got := Split(body); !slices.Equal(got, want) {
		t.Fatalf("Split:\n%q\nwant\n%q", got, want)
	}
}
