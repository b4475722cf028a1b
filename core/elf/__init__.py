"""ELF files: the image (sections, symbols, the SFrame section, program headers) and the
relocations of relocatable files (reloc)."""
