"""The Markdown reader of the GPU journey test: blocks, their languages and their headings."""

from __future__ import annotations

from pathlib import Path

from tests.support.doc_blocks import blocks, in_section

PAGE = """# Title
intro
```
cp a b
echo $?
```
## Your own change (start here)
```yaml
arms: {}
```
### Deeper
````bash
scripts/signoff.sh x   # a comment with ``` inside
````
## Next
~~~
ls
~~~
"""


def test_blocks_carry_their_language_text_line_and_headings(tmp_path: Path) -> None:
    path = tmp_path / "page.md"
    path.write_text(PAGE)
    found = blocks(path, "docs/page.md")
    assert [(b.language, b.line, b.section) for b in found] == [
        ("", 3, "Title"), ("yaml", 8, "Your own change (start here)"), ("bash", 12, "Deeper"),
        ("", 16, "Next")]
    assert found[0].text == "cp a b\necho $?\n"
    assert found[2].text == "scripts/signoff.sh x   # a comment with ``` inside\n"
    assert [b.is_shell for b in found] == [True, False, True, True]
    assert found[2].headings == ("Title", "Your own change (start here)", "Deeper")
    assert in_section(found, "Your own change (start here)") == found[1:3]
    assert found[1].where() == "docs/page.md:8 (Your own change (start here))"


def test_the_real_gpu_page_has_its_recipe_block() -> None:
    root = Path(__file__).resolve().parents[2]
    recipe = [b for b in in_section(blocks(root / "docs" / "gpu.md"), "Your own change (start here)")
              if b.is_shell]
    assert recipe
    assert "scripts/signoff.sh configs/local/my-change.yaml" in recipe[0].text
